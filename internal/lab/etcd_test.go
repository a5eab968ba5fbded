package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdProxiesFlag: --etcd-proxies is 0 to 16 and needs --etcd-members.
func TestEtcdProxiesFlag(t *testing.T) {
	for _, c := range []struct {
		members, proxies int
		err              string
	}{
		{0, 0, ""}, {3, 0, ""}, {3, 2, ""}, {1, 16, ""},
		{0, 2, "needs --etcd-members"},
		{3, -1, "want 0 to 16"},
		{3, 17, "want 0 to 16"},
		{-1, 0, "--etcd-members -1"},
	} {
		err := (&Config{EtcdMembers: c.members, EtcdProxies: c.proxies}).Validate()
		if c.err == "" && err != nil {
			t.Errorf("members %d proxies %d: %v", c.members, c.proxies, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("members %d proxies %d: error %v, want one with %q", c.members, c.proxies, err, c.err)
		}
	}
}

// TestProxyOf: with proxies saved in the lab's etcd directory, the edges
// and then the hosts take them round-robin; the other nodes none.
func TestProxyOf(t *testing.T) {
	l := &Lab{Cfg: Config{StateDir: t.TempDir()}, Topo: Build("t-", 3, 2, 1)}
	if got := l.ProxyOf("edge-a1"); got != "" {
		t.Fatalf("no cluster: edge-a1 points at %q", got)
	}
	os.MkdirAll(l.etcdDir(), 0o700)
	saved := `{"binary":"etcd","names":["m1"],"members":{"m1":0},"proxies":[{"name":"p1"},{"name":"p2"}]}`
	if err := os.WriteFile(filepath.Join(l.etcdDir(), "members.json"), []byte(saved), 0o600); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	nodes := l.proxyNodes()
	if want := len(Edges) + 3*2; len(nodes) != want {
		t.Fatalf("%d nodes use proxies, want %d (edges and hosts)", len(nodes), want)
	}
	for k, n := range nodes {
		got := l.ProxyOf(n.Name)
		want := "unix://" + filepath.Join(l.etcdDir(), []string{"p1", "p2"}[k%2]+"-client:23790")
		if got != want {
			t.Errorf("%s (%s) points at %q, want %q", n.Name, n.Role, got, want)
		}
		count[got]++
	}
	if len(count) != 2 {
		t.Errorf("spread over %v, want both proxies", count)
	}
	for ep, c := range count {
		if c < len(nodes)/2 {
			t.Errorf("proxy %s serves %d of %d nodes", ep, c, len(nodes))
		}
	}
	for _, name := range []string{"rtr", "fab", "az1-h1-g1", "inet"} {
		if got := l.ProxyOf(name); got != "" {
			t.Errorf("%s points at proxy %q", name, got)
		}
	}
	var v []EtcdProxyView
	b, _ := json.Marshal(l.etcdProxyView())
	json.Unmarshal(b, &v)
	if len(v) != 2 || len(v[0].Nodes)+len(v[1].Nodes) != len(nodes) || v[0].Nodes[0] != nodes[0].Name || v[1].Nodes[0] != nodes[1].Name {
		t.Errorf("status view %+v", v)
	}
}
