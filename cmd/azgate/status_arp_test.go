//go:build !node

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

func TestStatusShowsARPOwnership(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	st := &client.Status{Nodes: map[string][]model.NodeStatus{"edge": {
		{Role: "edge", Name: "e1", Updated: now, ARP: &model.ARPStatus{Scope: "dmz", Owner: true, Since: now.Add(-time.Minute), Interfaces: []string{"dmz0"}}},
		{Role: "edge", Name: "e2", Updated: now, ARP: &model.ARPStatus{Scope: "dmz", Since: now.Add(-time.Minute), Interfaces: []string{"dmz0"}}},
		{Role: "edge", Name: "e3", Updated: now},
	}}}
	var b bytes.Buffer
	printStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{"edge e1: ARP owner of dmz on dmz0 for 1m0s", "edge e2: ARP standby for dmz on dmz0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "edge e3: ") {
		t.Errorf("an edge without ARP interfaces has an ARP line:\n%s", out)
	}
}
