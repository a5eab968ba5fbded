package bandwidth

import (
	"fmt"
	"os"
	"strings"

	"github.com/azgate/azgate/internal/bwstore"
)

// MaxPasswordFile bounds a store password file: a password is a line, not
// a document.
const MaxPasswordFile = 4096

// OpenStore opens a measurement store by URL (docs/bandwidth.md,
// "Managers"; shared by the agents, edges and managers):
//
//   - "" or "mem:": a fresh in-process store (bwstore.NewMem). It is only
//     shared inside one process (tests, the simulator), so two processes
//     given "mem:" do not see each other.
//   - "unix:///path/redis.sock", "redis://host:port" or
//     "rediss://host:port" (TLS): a Redis store (bwstore.NewRedis), one
//     redis-server per zone.
//
// The password never comes in the URL (a command line is visible to every
// local user in ps): a URL holding one is refused. passwordFile, when not
// empty, holds it on its first line; the file must be a regular file with
// no permission for group or others (0600 or stricter), else it is
// refused, naming the file and its mode. The Redis connection is lazy:
// the first call dials.
func OpenStore(url, passwordFile string) (bwstore.Store, error) {
	if url == "" || url == "mem:" {
		if passwordFile != "" {
			return nil, fmt.Errorf("bandwidth store %q: a password file (%s) is for a Redis store only", url, passwordFile)
		}
		return bwstore.NewMem(nil), nil
	}
	scheme, _, ok := strings.Cut(url, "://")
	if !ok || (scheme != "unix" && scheme != "redis" && scheme != "rediss") {
		return nil, fmt.Errorf("bandwidth store %q: want mem:, unix:///path/redis.sock, redis://host:port or rediss://host:port", url)
	}
	cfg, err := bwstore.RedisConfigFromURL(url)
	if err != nil {
		return nil, fmt.Errorf("bandwidth store %q: %w", url, err)
	}
	if cfg.Password != "" {
		return nil, fmt.Errorf("bandwidth store: the URL holds a password: give it in a password file instead (a command line is visible in ps)")
	}
	if passwordFile != "" {
		pw, err := readPasswordFile(passwordFile)
		if err != nil {
			return nil, err
		}
		cfg.Password = pw
	}
	r, err := bwstore.NewRedis(cfg)
	if err != nil {
		return nil, fmt.Errorf("bandwidth store %q: %w", url, err)
	}
	return r, nil
}

// readPasswordFile reads the first line of a file that only its owner may
// read or write.
func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("bandwidth store password file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("bandwidth store password file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("bandwidth store password file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("bandwidth store password file %s: mode %04o lets group or others in: chmod 600 it", path, perm)
	}
	if fi.Size() > MaxPasswordFile {
		return "", fmt.Errorf("bandwidth store password file %s: %d bytes, at most %d", path, fi.Size(), MaxPasswordFile)
	}
	b := make([]byte, MaxPasswordFile+1)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("bandwidth store password file %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("bandwidth store password file %s: the first line is empty", path)
	}
	return line, nil
}
