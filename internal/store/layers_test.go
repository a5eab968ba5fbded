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
// imports the etcd client (tests may; internal/store/etcdembed, the
// controller's embedded server, imports etcd's server), none but internal/bgp imports
// GoBGP, none but internal/bwstore and internal/pathd/hopstore import go-redis, and the agent does not import the
// edge; the shipped binary (cmd/azgate) imports no lab, benchmark or
// test package (cmd/azgate-lab does). The bandwidth managers (internal/bandwidth, `azgate bwmgr`) import
// neither the data plane nor cilium/ebpf (the hosts' enforcement is
// internal/bwenforce), the hop store does not borrow bwstore's client, and
// internal/flowhash (the hash and its default seed) imports the standard
// library only. internal/netlab (namespaces, veth pairs) is lab plumbing: only the lab,
// the benchmarks, test packages and _test files import it. The controller
// does not link the GSLB's DNS server (internal/gslb/dnsserver), not even
// through other packages. The controller's Core (core.go, rules.go,
// errors.go) does not import net/http: handlers decode, call it and encode
// (issue 18). The bandwidth simulator (internal/bwsim) drives the real
// managers: it imports internal/bandwidth (it has no round of its own,
// issue 18 part 5), which does not import it back. `go list -f '{{.ImportPath}} {{.Imports}}' ./...` shows the same.
func TestLayers(t *testing.T) {
	controllerCore := map[string]bool{"core.go": true, "rules.go": true, "errors.go": true}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	const module = "github.com/azgate/azgate/"
	deps := map[string][]string{} // package dir → the module's packages it imports (non-test files)
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
			if dep, ok := strings.CutPrefix(p, module); ok {
				deps[rel] = append(deps[rel], dep)
			}
			if strings.HasPrefix(p, "go.etcd.io/") && rel != "internal/store" && rel != "internal/store/etcdembed" {
				t.Errorf("%s imports %s: only internal/store (and its embedded server, internal/store/etcdembed) may reach etcd", filepath.Join(rel, filepath.Base(path)), p)
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
			if rel == "internal/controller" && p == "net/http" && controllerCore[filepath.Base(path)] {
				t.Errorf("%s imports net/http: the controller's Core never sees a request (the handlers do)", filepath.Join(rel, filepath.Base(path)))
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
			if p == "github.com/azgate/azgate/internal/netlab" && !labOnly(rel) {
				t.Errorf("%s imports internal/netlab: only the lab, benchmarks, test packages and tests may (the daemons' next hops are internal/nexthop)", filepath.Join(rel, filepath.Base(path)))
			}
			// Every role and tool takes the flow hash and its default seed
			// (flowhash.DefaultHashSeed) from here: it stays pure.
			if rel == "internal/flowhash" && strings.Contains(p, ".") {
				t.Errorf("%s imports %s: the flow hash uses the standard library only", filepath.Join(rel, filepath.Base(path)), p)
			}
			if rel == "cmd/azgate" && labOnlyImport(p) {
				t.Errorf("%s imports %s: the lab, the benchmarks and test helpers belong in cmd/azgate-lab (cmd/azgate's TestShippedDeps checks the whole graph)", filepath.Join(rel, filepath.Base(path)), p)
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
	// Transitive rules: what a package must not link, directly or through
	// other packages of the module.
	for _, r := range []struct{ from, to, why string }{
		{"internal/controller", "internal/gslb/dnsserver", "the controller checks GSLB records with gslbplan and the gslb catalog; it does not link the DNS server"},
	} {
		if chain := importChain(deps, r.from, r.to); chain != nil {
			t.Errorf("%s imports %s through %s: %s", r.from, r.to, strings.Join(chain, " -> "), r.why)
		}
	}
}

// importChain returns a chain of imports from package dir from to package
// dir to (both relative to the module root), or nil when from does not
// reach to. Build constraints are not read: a file for another platform
// counts too.
func importChain(deps map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, d := range deps[p] {
			if _, seen := prev[d]; !seen {
				prev[d] = p
				queue = append(queue, d)
			}
		}
	}
	return nil
}

// labOnly reports whether the package in directory rel (relative to the
// repository) is lab, benchmark or test code, which may import lab
// plumbing: internal/lab and below, internal/bench and the *bench
// packages, the *test helper packages and everything under test/.
func labOnly(rel string) bool {
	base := filepath.Base(rel)
	return rel == "internal/lab" || strings.HasPrefix(rel, "internal/lab/") ||
		strings.HasSuffix(base, "bench") || strings.HasSuffix(base, "test") ||
		rel == "test" || strings.HasPrefix(rel, "test/")
}

// labOnlyImport: a package only the lab, the benchmarks and the tests use.
func labOnlyImport(p string) bool {
	rel, ok := strings.CutPrefix(p, "github.com/azgate/azgate/")
	if !ok {
		return p == "testing"
	}
	switch rel {
	case "internal/lab", "internal/bench", "internal/bwsim", "internal/gslbbench", "internal/store/etcdproc", "internal/netlab":
		return true
	}
	return strings.HasSuffix(rel, "test")
}
