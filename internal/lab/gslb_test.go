package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/azgate/azgate/internal/bwstore"
)

// TestGSLBKillChecksIdentity: GSLBLab.Kill signals a process it recorded
// while the PID is still that process, a redis-server (whose command line
// is its process title, not its argv) included, and refuses a PID that is
// another process (this test's own, recorded as a pathd).
func TestGSLBKillChecksIdentity(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("no redis-server binary: scripts/setup.sh installs it (apt-get install redis-server)")
		}
		t.Skip("no redis-server binary (apt-get install redis-server) and not root")
	}
	base, err := os.MkdirTemp("", "azgt-gk-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "eu-db")
	s, err := bwstore.StartServer(context.Background(), bwstore.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	g := &GSLBLab{Procs: map[string]*Proc{
		"eu-db/redis": redisProc(dir, s.PID),
		"eu-s1/pathd": {Cmd: "pathd --listen 0.0.0.0:7090", PID: os.Getpid()},
		"eu-s2/redis": redisProc(filepath.Join(base, "eu-s2"), s.PID),
	}}
	if err := g.Kill("eu-db/redis", syscall.Signal(0)); err != nil {
		t.Errorf("Kill of the lab's redis-server: %v", err)
	}
	for _, key := range []string{"eu-s1/pathd", "eu-s2/redis", "eu-s3/pathd"} {
		if err := g.Kill(key, syscall.Signal(0)); err == nil {
			t.Errorf("Kill(%s) signalled pid %d, which is not that process", key, g.Procs[key].PID)
		}
	}
}
