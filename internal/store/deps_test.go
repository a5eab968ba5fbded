package store

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// etcdServer is the import path prefix of etcd's server (its raft, its
// MVCC backend, its gRPC services): what etcdembed links.
const etcdServer = "go.etcd.io/etcd/server/"

// TestNoEtcdServer: what only follows the store (this package, the edge
// and agent Reconcilers and their follows) does not link etcd's server;
// the controller's embedded etcd is internal/store/etcdembed. Linking it
// costs every node role's process the server's package initialisers and
// the file pages they touch (docs/scale.md, "Memory of one edge and of an
// agent process").
func TestNoEtcdServer(t *testing.T) {
	for _, pkg := range []string{".", "../edge", "../agent"} {
		if got := linkedEtcdServer(t, pkg); len(got) > 0 {
			t.Errorf("%s links etcd's server (%d packages, e.g. %s): the embedded etcd belongs in internal/store/etcdembed", pkg, len(got), got[0])
		}
	}
	// The check itself: etcdembed links the server.
	if got := linkedEtcdServer(t, "./etcdembed"); len(got) == 0 {
		t.Error("the check finds no etcd server package in etcdembed's dependencies")
	}
}

func linkedEtcdServer(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", dir, err, out)
	}
	var got []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, etcdServer) {
			got = append(got, p)
		}
	}
	return got
}
