//go:build !node

package main

import (
	"testing"

	"github.com/azgate/azgate/internal/model"
)

func TestBandwidthLine(t *testing.T) {
	for _, c := range []struct {
		b    model.BandwidthStatus
		want string
	}{
		{model.BandwidthStatus{Zone: "az1", Direction: "egress", Mode: "managed", LimitsAgeMS: 1234, Generation: 7,
			EIPs: map[string]model.BandwidthEIP{"198.51.100.7": {Mode: "managed"}, "198.51.100.8": {Mode: "static"}}},
			"bandwidth egress in zone az1: managed, limits 1.2s old (generation 7); 2 packaged EIPs limited, 1 of them on the static split"},
		{model.BandwidthStatus{Zone: "edge", Direction: "ingress", Mode: "static", LimitsAgeMS: -1, EIPsLeftOut: 3},
			"bandwidth ingress in zone edge: static split (no limits from a manager); 3 packaged EIPs limited"},
	} {
		if got := bandwidthLine(&c.b); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
