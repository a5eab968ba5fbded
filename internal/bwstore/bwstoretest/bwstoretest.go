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

// Redis starts a redis-server for tb and returns a connected store and the
// server. If redis-server is missing it installs the Debian package when
// root, and skips (saying why) only when it cannot.
func Redis(tb testing.TB) (*bwstore.Redis, *bwstore.Server) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Geteuid() != 0 {
			tb.Skip("redis-server missing, and installing it needs root (apt-get install redis-server)")
		}
		if out, err := exec.Command("apt-get", "install", "-y", "redis-server").CombinedOutput(); err != nil {
			tb.Skipf("redis-server missing and apt-get install failed: %v: %.300s", err, out)
		}
	}
	dir, err := os.MkdirTemp("", "azgbw-") // short: a socket path has at most 107 bytes
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := bwstore.StartServer(context.Background(), bwstore.ServerConfig{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Stop() })
	r, err := bwstore.NewRedis(srv.Config())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r, srv
}
