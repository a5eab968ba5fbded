package lab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
)

// TestRegionIsValid: the lab's region document passes the model's checks
// object by object and as a whole, and setplan gives each set the routes
// the lab expects its edges to announce.
func TestRegionIsValid(t *testing.T) {
	l := &Lab{Cfg: Config{AZs: 3, HostsPerAZ: 2, GuestsPerHost: 2}}
	d := l.Region()
	st := model.NewState()
	for _, p := range d.Placed() {
		if es := p.Obj.Validate(); len(es) > 0 {
			t.Fatalf("%s: %v", p.Place, es)
		}
		if _, err := st.Put(p.Obj); err != nil {
			t.Fatalf("%s: %v", p.Place, err)
		}
	}
	// Pull one EIP out and quarantine another: each moves to its own set.
	pulled, quar := netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("198.51.100.9")
	for _, o := range []model.Object{&model.EIP{Address: pulled, Set: DedicatedSet}, &model.Quarantine{Address: quar}} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	in := setplan.FromState(st)
	for _, c := range []struct {
		edge string
		want []string
	}{
		{"edge-a1", []string{EIPPrefix}}, {"edge-b2", []string{EIPPrefix}},
		{"edge-d1", []string{"198.51.100.8/32"}}, {"edge-q1", []string{"198.51.100.9/32"}},
	} {
		var got []string
		for _, p := range in.Announcements(c.edge) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s announces %v, want %v", c.edge, got, c.want)
		}
	}
	if len(EdgesOf(PrefixSet)) != 4 {
		t.Errorf("prefix set: %v, want two POPs of two edges", EdgesOf(PrefixSet))
	}
	// The addresses BGP uses are the topology's.
	topo := Build("x-", 3, 2, 2)
	for _, e := range Edges {
		if got := topo.Node(e.Name).Addresses["ext0"]; got != EdgeExtOf(e.Name).String()+"/31" {
			t.Errorf("%s ext0 %s, next hop %v", e.Name, got, EdgeExtOf(e.Name))
		}
		if got := topo.Node("rtr").Addresses[e.Name]; got != RouterSideOf(e.Name).String()+"/31" {
			t.Errorf("rtr/%s %s, peer %v", e.Name, got, RouterSideOf(e.Name))
		}
	}
	if EdgeUnderlayOf("edge-a1").String() != EdgeUnderlay {
		t.Errorf("edge-a1 underlay %v, want %s", EdgeUnderlayOf("edge-a1"), EdgeUnderlay)
	}
}

// TestBirdConfigParses runs Debian's bird2 on the generated configuration
// in parse-only mode (bird -p).
func TestBirdConfigParses(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatalf("bird (Debian bird2) is not installed: %v (scripts/setup.sh installs it)", err)
	}
	f := filepath.Join(t.TempDir(), "bird.conf")
	if err := os.WriteFile(f, []byte(BirdConfig()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bird", "-p", "-c", f).CombinedOutput(); err != nil {
		t.Fatalf("bird -p: %v: %s\n%s", err, out, BirdConfig())
	}
}
