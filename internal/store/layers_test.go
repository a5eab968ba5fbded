package store

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayers holds issue 7's layering: no package but internal/store
// imports the etcd client (tests may), none but internal/bgp imports
// GoBGP, none but internal/bwstore and internal/pathd/hopstore import go-redis, and the agent does not import the
// edge. The bandwidth managers (internal/bandwidth, `azgate bwmgr`) import
// neither the data plane nor cilium/ebpf (the hosts' enforcement is
// internal/bwenforce), and the hop store does not borrow bwstore's client.
// The bandwidth simulator (internal/bwsim) drives the real managers: it
// imports internal/bandwidth (it has no round of its own, issue 18 part
// 5), which does not import it back. `go list -f '{{.ImportPath}} {{.Imports}}' ./...` shows the same.
func TestLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	bwsimManagers := false
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || strings.HasPrefix(n, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, "go.etcd.io/") && rel != "internal/store" {
				t.Errorf("%s imports %s: only internal/store may reach etcd", filepath.Join(rel, filepath.Base(path)), p)
			}
			if strings.HasPrefix(p, "github.com/osrg/gobgp/") && rel != "internal/bgp" {
				t.Errorf("%s imports %s: only internal/bgp may reach GoBGP", filepath.Join(rel, filepath.Base(path)), p)
			}
			if strings.HasPrefix(p, "github.com/redis/go-redis/") && rel != "internal/bwstore" && rel != "internal/pathd/hopstore" {
				t.Errorf("%s imports %s: only internal/bwstore and internal/pathd/hopstore may reach Redis", filepath.Join(rel, filepath.Base(path)), p)
			}
			if rel == "internal/bandwidth" && (p == "github.com/azgate/azgate/internal/dataplane" || strings.HasPrefix(p, "github.com/cilium/")) {
				t.Errorf("%s imports %s: the managers do not link the data plane (internal/bwenforce does)", filepath.Join(rel, filepath.Base(path)), p)
			}
			if rel == "internal/pathd/hopstore" && strings.HasPrefix(p, "github.com/azgate/azgate/internal/bwstore") {
				t.Errorf("%s imports %s: the hop store has its own Redis client", filepath.Join(rel, filepath.Base(path)), p)
			}
			if rel == "internal/bwsim" && p == "github.com/azgate/azgate/internal/bandwidth" {
				bwsimManagers = true
			}
			if rel == "internal/bandwidth" && p == "github.com/azgate/azgate/internal/bwsim" {
				t.Errorf("%s imports %s: the simulator drives the managers, not the reverse", filepath.Join(rel, filepath.Base(path)), p)
			}
			if rel == "internal/agent" && p == "github.com/azgate/azgate/internal/edge" {
				t.Errorf("%s imports the edge", filepath.Join(rel, filepath.Base(path)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bwsimManagers {
		t.Error("internal/bwsim does not import internal/bandwidth: the simulator must run the real managers, not a round of its own")
	}
}
