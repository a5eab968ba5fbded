package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// vipUnder6 and vipUnder66 are the services TestUnderlay6 puts behind
// both underlays (from the prefix set's prefixes).
const (
	vipUnder6  = "198.51.100.60"
	vipUnder66 = "2001:db8:e1::60"
)

// TestUnderlay6 runs the region on a mixed underlay (lab up --underlay
// mixed): the hosts of az2 reach the edges over IPv6 only (no IPv4
// address on their underlay link), those of az1 and az3 over IPv4 only,
// and the edges are dual-stack there (issue 21: "NVGRE to the host over
// an IPv4 or IPv6 underlay, outer family independent of the inner").
//   - An IPv4 and an IPv6 EIP drift from an IPv4-underlay host to an
//     IPv6-underlay host and on to another IPv4-underlay host under a
//     stream of requests, each move within the drift bound (1 in 1,000).
//   - An encap service on an IPv4 and an IPv6 VIP with backends on both
//     underlays: the edges' health checks through the tunnel pass on
//     both (the checks to az2's guests travel over IPv6), both VIPs reach
//     both backends, and a backend on the IPv6 underlay whose server
//     stops is marked down.
func TestUnderlay6(t *testing.T) {
	l := upLabWith(t, func(c *lab.Config) { c.Underlay = lab.UnderlayMixed })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}

	// az2-h1 has no IPv4 address on its underlay: whatever reaches its
	// guests came over IPv6.
	if out, err := inNode(l, "az2-h1", "ip", "-4", "-o", "addr", "show", "dev", "ul0"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("az2-h1's ul0 IPv4 addresses: %q (%v), want none", out, err)
	}
	if out, err := inNode(l, "az1-h1", "ip", "-6", "-o", "addr", "show", "dev", "ul0", "scope", "global"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("az1-h1's ul0 global IPv6 addresses: %q (%v), want none", out, err)
	}

	for _, e := range []string{eip6, eip} {
		if _, err := c.BindEIP(ctx, e, "az1-h1", "g1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{lab.EIPURL(eip6), lab.EIPURL(eip)} {
		if _, err := l.WaitAnswer(ctx, u, "hello from az1-h1-g1", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []string{eip6, eip} {
		t.Run("drift "+e+" IPv4 underlay -> IPv6 underlay", func(t *testing.T) {
			checkDrift(t, ctx, l, e, "az1-h1/g1", "az2-h1", "g1")
		})
		t.Run("drift "+e+" IPv6 underlay -> IPv4 underlay", func(t *testing.T) {
			checkDrift(t, ctx, l, e, "az2-h1/g1", "az3-h1", "g1")
		})
	}

	hc := &model.HealthCheck{Type: "http", Path: "/", Interval: model.Duration(300 * time.Millisecond),
		Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 2}
	backends := encapBackends("g1", "az1-h2", "az2-h2")
	for _, vip := range []string{vipUnder6, vipUnder66} {
		name := "under-" + strings.NewReplacer(".", "-", ":", "-").Replace(vip)
		svc := &model.Service{Name: name, VIP: netip.MustParseAddr(vip), Mode: model.ModeEncap,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
			Pools:     []model.Pool{{Name: "web", Backends: backends, Health: hc}}}
		if _, err := c.PutService(ctx, svc); err != nil {
			t.Fatal(err)
		}
		waitVerdicts(t, ctx, c, name, []string{"web"}, map[string]bool{"az1-h2/g1": true, "az2-h2/g1": true})
		url := lab.EIPURL(vip)
		waitServing(t, ctx, l, url)
		got := answers(t, ctx, l, url, 40)
		t.Logf("%s answers: %v", vip, got)
		if got["hello from az1-h2-g1"] == 0 || got["hello from az2-h2-g1"] == 0 {
			t.Fatalf("%s did not reach a backend on each underlay: %v", vip, got)
		}
	}
	// The IPv6-underlay backend's server stops: both services see it.
	if err := l.StopServer("az2-h2-g1"); err != nil {
		t.Fatal(err)
	}
	for _, vip := range []string{vipUnder6, vipUnder66} {
		name := "under-" + strings.NewReplacer(".", "-", ":", "-").Replace(vip)
		waitVerdicts(t, ctx, c, name, []string{"web"}, map[string]bool{"az1-h2/g1": true, "az2-h2/g1": false})
		for body := range answers(t, ctx, l, lab.EIPURL(vip), 10) {
			if body != "hello from az1-h2-g1" {
				t.Errorf("%s answered %q after az2-h2-g1 stopped", vip, body)
			}
		}
	}
}
