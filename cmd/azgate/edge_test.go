//go:build !node

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// TestCLIEdgeDrain: azgate edge drain|undrain flips the edge's Drained
// flag in its set through the API.
func TestCLIEdgeDrain(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	if out := must(t, s, "edge", "drain", "edge-a1"); !strings.Contains(out, "withdraws its routes") {
		t.Errorf("edge drain:\n%s", out)
	}
	if out := must(t, s, "--json", "set", "get", "pop-a"); !strings.Contains(out, `"drained": true`) {
		t.Errorf("not drained:\n%s", out)
	}
	must(t, s, "edge", "undrain", "edge-a1")
	if out := must(t, s, "--json", "set", "get", "pop-a"); strings.Contains(out, `"drained"`) {
		t.Errorf("still drained:\n%s", out)
	}
	if out, err := azgate(t, s, "", "edge", "drain", "edge-zz"); err == nil || !strings.Contains(out+err.Error(), "in no edge set") {
		t.Errorf("draining an unknown edge: %v\n%s", err, out)
	}
	// The last serving edge of pop-a drains only with --force.
	must(t, s, "edge", "drain", "edge-a1")
	if _, err := azgate(t, s, "", "edge", "drain", "edge-a2"); err == nil || !strings.Contains(err.Error(), `edge set "pop-a" would have no serving edge`) {
		t.Errorf("draining the last serving edge: %v", err)
	}
	if out := must(t, s, "--json", "set", "get", "pop-a"); strings.Count(out, `"drained": true`) != 1 {
		t.Errorf("the refused drain was written:\n%s", out)
	}
	must(t, s, "edge", "drain", "edge-a2", "--force")
}

func TestPrintBGP(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	nodes := []model.NodeStatus{
		{Role: "edge", Name: "edge-a1", BGP: &model.BGPStatus{Announcing: true, Advertised: []string{"198.51.100.0/24"},
			Sessions: []model.BGPSession{{Peer: "192.0.2.1", ASN: 64512, State: "established", Since: now.Add(-5 * time.Minute), Advertised: 1}}}},
		{Role: "edge", Name: "edge-a2", BGP: &model.BGPStatus{Failing: []string{"drained"}, Advertised: []string{},
			Sessions: []model.BGPSession{{Peer: "192.0.2.1", ASN: 64512, State: "active"}}}},
		{Role: "agent", Name: "az1-h1"},
	}
	var b bytes.Buffer
	printBGP(&b, nodes, now)
	want := `
bgp edge-a1: announcing, advertising 198.51.100.0/24
  peer 192.0.2.1 AS64512 established for 5m0s, 0 received, 1 advertised
bgp edge-a2: withdrawn (drained), advertising nothing
  peer 192.0.2.1 AS64512 active, 0 received, 0 advertised
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
