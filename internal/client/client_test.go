package client

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/model"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flagTok := write("flag-token", "tok-flag\n")
	envTok := write("env-token", "tok-env")
	ctxTok := write("ctx-token", " tok-ctx \n")
	empty := write("empty-token", "\n")
	labCtx := filepath.Join(dir, "lab", "context.json")
	if err := WriteContext(labCtx, Context{API: "unix:///run/lab/api.sock", TokenFile: ctxTok}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(labCtx); fi.Mode().Perm() != 0o644 {
		t.Errorf("context file mode %v", fi.Mode().Perm())
	}
	if c, err := ReadContext(labCtx); err != nil || c.API != "unix:///run/lab/api.sock" {
		t.Errorf("ReadContext: %+v, %v", c, err)
	}
	badCtx := write("bad.json", `{"api": "x", "token": "y"}`)
	missing := filepath.Join(dir, "nope")

	for _, tc := range []struct {
		name               string
		api, tokenFile     string            // flags
		env                map[string]string // environment
		defaultContext     string            // the file at the default context path
		wantAPI, wantToken string
		wantFrom           string
		wantErr            string
	}{
		{name: "flags win", api: "http://10.0.0.1:1", tokenFile: flagTok,
			env:     map[string]string{"AZGATE_API": "http://env:1", "AZGATE_TOKEN_FILE": envTok, "AZGATE_CONTEXT": labCtx},
			wantAPI: "http://10.0.0.1:1", wantToken: "tok-flag", wantFrom: "--token-file " + flagTok},
		{name: "environment over context", env: map[string]string{"AZGATE_API": "http://env:1", "AZGATE_TOKEN_FILE": envTok, "AZGATE_CONTEXT": labCtx},
			wantAPI: "http://env:1", wantToken: "tok-env", wantFrom: "$AZGATE_TOKEN_FILE=" + envTok},
		{name: "each from its own source", api: "http://flag:1", env: map[string]string{"AZGATE_CONTEXT": labCtx},
			wantAPI: "http://flag:1", wantToken: "tok-ctx"},
		{name: "named context", env: map[string]string{"AZGATE_CONTEXT": labCtx}, wantAPI: "unix:///run/lab/api.sock", wantToken: "tok-ctx",
			wantFrom: ctxTok + " (the context file " + labCtx + ")"},
		{name: "default context", defaultContext: labCtx, wantAPI: "unix:///run/lab/api.sock", wantToken: "tok-ctx"},
		{name: "defaults", tokenFile: flagTok, defaultContext: missing, wantAPI: DefaultAPI, wantToken: "tok-flag"},
		{name: "missing named context", env: map[string]string{"AZGATE_CONTEXT": missing}, wantErr: "context file"},
		{name: "bad context", env: map[string]string{"AZGATE_CONTEXT": badCtx}, wantErr: `unknown field "token"`},
		{name: "missing token file", tokenFile: missing, defaultContext: missing, wantErr: missing + " does not exist: the controller writes"},
		{name: "empty token file", tokenFile: empty, defaultContext: missing, wantErr: "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"AZGATE_API", "AZGATE_TOKEN_FILE", "AZGATE_CONTEXT"} {
				t.Setenv(k, tc.env[k])
			}
			defaultContextFile = tc.defaultContext
			if defaultContextFile == "" {
				defaultContextFile = missing
			}
			t.Cleanup(func() { defaultContextFile = DefaultContextFile })
			api, tok, from, err := ResolveFrom(tc.api, tc.tokenFile)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if api != tc.wantAPI || tok != tc.wantToken {
				t.Errorf("got %q, %q; want %q, %q", api, tok, tc.wantAPI, tc.wantToken)
			}
			if tc.wantFrom != "" && from != tc.wantFrom {
				t.Errorf("token from %q, want %q", from, tc.wantFrom)
			}
		})
	}
}

func TestNewBadURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "unix://", "http://", "127.0.0.1:7080"} {
		if _, err := New(u, "t").AZs(context.Background()); err == nil || !strings.Contains(err.Error(), "API URL") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

func TestAPIErrorText(t *testing.T) {
	e := &APIError{Status: 422, Message: `invalid host "h1": az: AZ "az9" does not exist`,
		Fields: []model.FieldError{{Field: "az", Msg: `AZ "az9" does not exist`}, {Field: "underlay", Msg: "required"}}}
	if got, want := e.Error(), "invalid host \"h1\": az: AZ \"az9\" does not exist\n  underlay: required"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestAgainstController uses the client over TCP and a unix socket.
func TestAgainstController(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: dir, Listen: "127.0.0.1:0", ListenUnix: sock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, base := range []string{s.URL(), "unix://" + sock} {
		t.Run(base, func(t *testing.T) {
			c := New(base, s.Token())
			name := "az-" + strings.NewReplacer(":", "", "/", "", ".", "").Replace(base)[:8]
			res, err := c.Create(ctx, &model.AZ{Name: strings.ToLower(name)})
			if err != nil || res.Action != "created" || res.Revision == 0 {
				t.Fatalf("create: %+v, %v", res, err)
			}
			if _, err := c.Get(ctx, model.KindAZ, "nope"); !IsNotFound(err) {
				t.Errorf("get missing: %v", err)
			}
			_, err = c.Create(ctx, &model.Host{Name: "h1", AZ: "az9"})
			ae, ok := err.(*APIError)
			if !ok || ae.Status != http.StatusUnprocessableEntity || len(ae.Fields) == 0 || !strings.Contains(err.Error(), "underlay: required") {
				t.Errorf("invalid host: %#v", err)
			}
			if _, err := New(base, "wrong").AZs(ctx); err == nil || err.(*APIError).Status != 401 {
				t.Errorf("wrong token: %v", err)
			}
			st, err := c.Status(ctx)
			if err != nil || st.Controller.Store != "embedded" {
				t.Errorf("status: %+v, %v", st, err)
			}
		})
	}
}
