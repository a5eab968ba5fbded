package bandwidth

// TEMPORARY (role helper, issue 10): the manager helper owns this file
// (BW-CONTRACT.md); its version replaces this one at the merge, and the
// constants below come from its manager.go then (same names and values).

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
)

// Defaults of the interval and grace period (the managers' and the
// hosts').
const (
	DefaultInterval = time.Second
	DefaultGrace    = 10 * time.Second
)

// MinBurstBytes is the least burst a limit carries: a bucket must hold a
// few full-size packets, whatever its rate (BW-CONTRACT.md).
const MinBurstBytes = 15_000

// OpenStore opens a measurement store from a URL: "" or "mem:" is a
// fresh in-process store (bwstore.NewMem: only useful inside one process);
// "unix:///path/to/redis.sock", "redis://host:port" or "rediss://host:port"
// is a Redis. The password, if any, comes from passwordFile (mode 0600 or
// stricter), never from the URL: a command line is readable by every
// local user.
func OpenStore(rawURL, passwordFile string) (bwstore.Store, error) {
	if rawURL == "" || rawURL == "mem:" {
		if passwordFile != "" {
			return nil, fmt.Errorf("bandwidth store %q: a password file is for Redis only", rawURL)
		}
		return bwstore.NewMem(nil), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bandwidth store: %w", err)
	}
	switch u.Scheme {
	case "unix", "redis", "rediss":
	default:
		return nil, fmt.Errorf("bandwidth store %q: want mem:, unix:///path/to/redis.sock, redis://host:port or rediss://host:port", rawURL)
	}
	if _, has := u.User.Password(); has {
		return nil, fmt.Errorf("bandwidth store %q: a password in the URL is visible to every local user: put it in a file and give --bw-store-password-file", u.Redacted())
	}
	cfg, err := bwstore.RedisConfigFromURL(rawURL)
	if err != nil {
		return nil, err
	}
	if passwordFile != "" {
		pw, err := readSecret(passwordFile)
		if err != nil {
			return nil, err
		}
		cfg.Password = pw
	}
	return bwstore.NewRedis(cfg)
}

// readSecret reads a password file, refusing one that others may read or
// write.
func readSecret(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("bandwidth store password file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("bandwidth store password file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("bandwidth store password file %s: mode %04o: others may read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("bandwidth store password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("bandwidth store password file %s is empty", path)
	}
	return pw, nil
}
