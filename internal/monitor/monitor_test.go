package monitor

import (
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
)

func TestFilter(t *testing.T) {
	frame := udpFrame("203.0.113.10", "198.51.100.7", 1, 2)
	drop := dataplane.MonitorEvent{Kind: dataplane.MonDrop, Reason: "drop_spoof_bogon", Data: frame}
	in := dataplane.MonitorEvent{Kind: dataplane.MonIn, Data: frame}
	noIP := dataplane.MonitorEvent{Kind: dataplane.MonDrop, Reason: "drop_eth_trunc", Data: frame[:13]}
	pfx := func(s ...string) []netip.Prefix {
		p, err := ParsePrefixes(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		f    Filter
		ev   *dataplane.MonitorEvent
		want bool
	}{
		{"zero filter", Filter{}, &drop, true},
		{"reason", Filter{Reasons: []string{"drop_spoof_bogon"}}, &drop, true},
		{"other reason", Filter{Reasons: []string{"drop_ip_csum"}}, &drop, false},
		{"reason prefix", Filter{Reasons: []string{"drop_spoof*"}}, &drop, true},
		{"source address", Filter{Prefixes: pfx("203.0.113.10")}, &drop, true},
		{"destination prefix", Filter{Prefixes: pfx("198.51.100.0/24")}, &drop, true},
		{"other address", Filter{Prefixes: pfx("192.0.2.1")}, &drop, false},
		{"address of a frame without IPv4", Filter{Prefixes: pfx("203.0.113.10")}, &noIP, false},
		{"drops only: a trace event", Filter{DropsOnly: true}, &in, false},
		{"reason: trace in events pass (no reason yet)", Filter{Reasons: []string{"drop_ip_csum"}}, &in, true},
	} {
		if got := c.f.Match(c.ev, dataplane.ParseTuple(c.ev.Data)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if _, err := ParseReasons([]string{"drop_nonsense"}); err == nil {
		t.Error("an unknown reason was taken")
	}
	if _, err := ParsePrefixes([]string{"203.0.113"}); err == nil {
		t.Error("a malformed address was taken")
	}
}

func TestLine(t *testing.T) {
	ev := dataplane.MonitorEvent{Kind: dataplane.MonDrop, Reason: "drop_ip_csum", CPU: 1, Len: 58, Data: udpFrame("203.0.113.10", "198.51.100.7", 1, 2)}
	got := Line(&ev, dataplane.ParseTuple(ev.Data), "ext0", 4)
	want := "0.000000 cpu1 ext0 drop drop_ip_csum udp 203.0.113.10:1 > 198.51.100.7:2 len 58 | 02000000"
	if got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
