package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

const vipTwins = "198.51.100.40" // encap: two guests with one private address

// TestHealthThroughTunnel: az1-h1/g1 and az2-h1/g1 have the same private
// address, which the underlay does not route. The edge checks both (http,
// tcp and udp) through the NVGRE tunnel to their hosts, both serve the
// VIP, and when one stops its server exactly that one is marked down in
// every pool.
func TestHealthThroughTunnel(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	a, b := lab.GuestAddr(1, 1, 1), lab.GuestAddr(2, 1, 1)
	if a != b {
		t.Fatalf("the lab gives az1-h1/g1 %v and az2-h1/g1 %v: want one address", a, b)
	}
	// Not reachable outside the tunnel: the edge itself cannot reach the
	// address over the underlay.
	if out, err := inNode(l, "edge-a1", "curl", "-s", "-m", "2", "http://"+a.String()+"/"); err == nil {
		t.Fatalf("the edge reached %v over the underlay: %s", a, out)
	} else if !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("curl in edge-a1: %v", err)
	}

	fast := func(typ string) *model.HealthCheck {
		hc := &model.HealthCheck{Type: typ, Interval: model.Duration(300 * time.Millisecond),
			Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 2}
		if typ == "http" {
			hc.Path = "/"
		}
		return hc
	}
	twins := encapBackends("g1", "az1-h1", "az2-h1")
	svc := &model.Service{Name: "twins", VIP: netip.MustParseAddr(vipTwins), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "http"}, {Protocol: "tcp", Port: 7000, Pool: "tcp"},
			{Protocol: "udp", Port: 7000, Pool: "udp"}},
		Pools: []model.Pool{
			{Name: "http", Backends: twins, Health: fast("http")},
			{Name: "tcp", Backends: twins, Health: fast("tcp")},
			{Name: "udp", Backends: twins, Health: fast("udp")},
		}}
	if _, err := c.PutService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pools := []string{"http", "tcp", "udp"}
	keys := []string{"az1-h1/g1", "az2-h1/g1"}
	waitVerdicts(t, ctx, c, "twins", pools, map[string]bool{keys[0]: true, keys[1]: true})

	got := answers(t, ctx, l, "http://"+vipTwins+"/", 40)
	t.Logf("VIP answers: %v", got)
	if got["hello from az1-h1-g1"] == 0 || got["hello from az2-h1-g1"] == 0 {
		t.Fatalf("the VIP did not reach both twins: %v", got)
	}

	if err := l.StopServer("az2-h1-g1"); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, ctx, c, "twins", pools, map[string]bool{keys[0]: true, keys[1]: false})
	// It stays so: the twin with the same address is not taken down too.
	time.Sleep(2 * time.Second)
	waitVerdicts(t, ctx, c, "twins", pools, map[string]bool{keys[0]: true, keys[1]: false})
	for body := range answers(t, ctx, l, "http://"+vipTwins+"/", 20) {
		if !strings.Contains(body, "az1-h1-g1") {
			t.Errorf("the VIP answered %q after az2-h1-g1 stopped", body)
		}
	}

	// A restarted edge adopts its health-check device and swaps the
	// program of its pinned TCX link: the checks go on, and the server's
	// return is seen through the tunnel.
	if err := l.RestartRole("edge-a1"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartServer("az2-h1-g1"); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, ctx, c, "twins", pools, map[string]bool{keys[0]: true, keys[1]: true})
	if out, err := inNode(l, "edge-a1", "ip", "rule", "show", "table", "2599"); err != nil || strings.Count(out, "lookup") != 1 {
		t.Errorf("after a restart the health-check rules are %q (%v), want one", out, err)
	}
}

// inNode runs a command in a lab node and returns its output.
func inNode(l *lab.Lab, node string, argv ...string) (string, error) {
	cmd := l.Exec(node, argv)
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &out, &out
	err := cmd.Run()
	return out.String(), err
}

// waitVerdicts waits until, in every pool, each backend of want has an
// up-to-date report from the edge saying up (true) or down (false) and the
// stored verdict agrees.
func waitVerdicts(t *testing.T, ctx context.Context, c *client.Client, svc string, pools []string, want map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		st, err := c.ServiceStatus(ctx, svc)
		if err == nil {
			ok, why := verdictsAre(st, pools, want)
			if ok {
				return
			}
			last = why
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("service %s: verdicts never became %v: %s", svc, want, last)
}

func verdictsAre(st *api.ServiceStatus, pools []string, want map[string]bool) (bool, string) {
	byName := map[string]api.PoolStatus{}
	for _, p := range st.Pools {
		byName[p.Name] = p
	}
	for _, pool := range pools {
		p, ok := byName[pool]
		if !ok {
			return false, "no pool " + pool
		}
		healthy := 0
		for _, b := range p.Backends {
			up, ok := want[b.Key]
			if !ok {
				continue
			}
			if up {
				healthy++
			}
			if up && (b.Down || b.UpVotes == 0 || b.DownVotes != 0) {
				return false, pool + "/" + b.Key + " not up"
			}
			if !up && (!b.Down || b.DownVotes == 0) {
				return false, pool + "/" + b.Key + " not down"
			}
		}
		// The verdict reached every edge's table: with several edges the
		// verdict can read "up" (no down votes) while edges still hold
		// the table they built before the majority was in.
		if len(p.Backends) == len(want) {
			for _, tb := range p.Tables {
				if tb.Missing != "" || tb.Healthy != healthy {
					return false, fmt.Sprintf("pool %s: edge %s's table has %d healthy backends (missing %q), want %d", pool, tb.Edge, tb.Healthy, tb.Missing, healthy)
				}
			}
		}
	}
	return true, ""
}
