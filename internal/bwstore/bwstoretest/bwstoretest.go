// Package bwstoretest gives other packages' tests (the AZ manager, the
// agent, the lab's tests) a real per-AZ Redis store: its own redis-server on
// a unix socket in a fresh 0700 directory, stopped by PID at cleanup.
package bwstoretest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/azgate/azgate/internal/bwstore"
)

// Redis starts a redis-server for tb (Server with the default settings)
// and returns a connected store and the server.
func Redis(tb testing.TB) (*bwstore.Redis, *bwstore.Server) {
	tb.Helper()
	srv := Server(tb, bwstore.ServerConfig{})
	r, err := bwstore.NewRedis(srv.Config())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r, srv
}

// Server starts a redis-server with cfg for tb (its Dir a fresh 0700
// directory) and stops it by PID at cleanup. If redis-server is missing
// it fails a root test (as the etcd tests do: scripts/setup.sh installs
// it) and skips, saying why, only when not root. It does not install it:
// on Debian the package starts a system redis-server on 127.0.0.1:6379
// without a password.
func Server(tb testing.TB, cfg bwstore.ServerConfig) *bwstore.Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Geteuid() == 0 {
			tb.Fatal("no redis-server binary: scripts/setup.sh installs it (apt-get install redis-server)")
		}
		tb.Skip("no redis-server binary (apt-get install redis-server) and not root: skipping the Redis store tests")
	}
	dir, err := os.MkdirTemp("", "azgbw-") // short: a socket path has at most 107 bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	cfg.Dir = dir
	srv, err := bwstore.StartServer(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Stop() })
	return srv
}
