package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Defaults used when neither flags, environment nor a context say otherwise.
const (
	DefaultAPI         = "http://127.0.0.1:7080"
	DefaultTokenFile   = "/var/lib/azgate/token"
	DefaultContextFile = "/run/azgate/context.json"
)

// defaultContextFile is DefaultContextFile; tests point it elsewhere.
var defaultContextFile = DefaultContextFile

// Context tells the CLI which controller to talk to; the lab writes one
// so that `azgate` commands reach the lab's controller without flags.
type Context struct {
	API       string `json:"api"`
	TokenFile string `json:"token_file"`
}

// ReadContext reads a context file.
func ReadContext(path string) (Context, error) {
	var c Context
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("context file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("context file %s: %w", path, err)
	}
	return c, nil
}

// WriteContext writes a context file (atomically, mode 0644: it holds the
// token's path, not the token).
func WriteContext(path string, c Context) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".context-*")
	if err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("context file %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("context file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("context file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("context file %s: %w", path, err)
	}
	return nil
}

// Resolve finds the API URL and reads the token. Each of the two comes
// from the first of: the flag, the environment ($AZGATE_API,
// $AZGATE_TOKEN_FILE), the context file ($AZGATE_CONTEXT, else
// /run/azgate/context.json when it exists), the default.
func Resolve(apiFlag, tokenFileFlag string) (baseURL, token string, err error) {
	baseURL, token, _, err = ResolveFrom(apiFlag, tokenFileFlag)
	return baseURL, token, err
}

// ResolveFrom is Resolve, and also says where the token was read from:
// "--token-file PATH", "$AZGATE_TOKEN_FILE=PATH", "PATH (the context file
// CTX)" or "PATH (the default)" (for Client.TokenFrom).
func ResolveFrom(apiFlag, tokenFileFlag string) (baseURL, token, tokenFrom string, err error) {
	baseURL, tokenFile := apiFlag, tokenFileFlag
	if tokenFile != "" {
		tokenFrom = "--token-file " + tokenFile
	}
	if baseURL == "" {
		baseURL = os.Getenv("AZGATE_API")
	}
	if tokenFile == "" {
		if tokenFile = os.Getenv("AZGATE_TOKEN_FILE"); tokenFile != "" {
			tokenFrom = "$AZGATE_TOKEN_FILE=" + tokenFile
		}
	}
	if baseURL == "" || tokenFile == "" {
		path, named := os.Getenv("AZGATE_CONTEXT"), true
		if path == "" {
			path, named = defaultContextFile, false
		}
		c, err := ReadContext(path)
		switch {
		case err == nil:
			if baseURL == "" {
				baseURL = c.API
			}
			if tokenFile == "" && c.TokenFile != "" {
				tokenFile = c.TokenFile
				tokenFrom = fmt.Sprintf("%s (the context file %s)", tokenFile, path)
			}
		case errors.Is(err, fs.ErrNotExist) && !named:
			// No lab context: the defaults apply.
		default:
			return "", "", "", err
		}
	}
	if baseURL == "" {
		baseURL = DefaultAPI
	}
	if tokenFile == "" {
		tokenFile = DefaultTokenFile
		tokenFrom = tokenFile + " (the default)"
	}
	b, err := os.ReadFile(tokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", "", "", fmt.Errorf("token file %s does not exist: the controller writes its API token to DATA_DIR/%s on first start "+
			"(`azgate controller --data-dir DATA_DIR`); point --token-file or $AZGATE_TOKEN_FILE at it", tokenFile, filepath.Base(DefaultTokenFile))
	case errors.Is(err, fs.ErrPermission):
		return "", "", "", fmt.Errorf("token file %s: permission denied: it is readable by the controller's user only (try sudo)", tokenFile)
	case err != nil:
		return "", "", "", fmt.Errorf("token file: %w", err)
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		return "", "", "", fmt.Errorf("token file %s is empty", tokenFile)
	}
	return baseURL, token, tokenFrom, nil
}
