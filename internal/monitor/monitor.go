// Package monitor filters, prints and writes to pcapng the events of the
// data plane's monitor (internal/dataplane, bpf/lib/monitor.h) for
// `azgate monitor` and `azgate capture`. The filters run here, in user
// space: the data plane writes every event its rate limit allows, and
// what a filter leaves out still took its token.
package monitor

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/azgate/azgate/internal/dataplane"
)

// Filter selects events; its zero value selects all.
type Filter struct {
	// Reasons: the counters an event must be counted under (StatNames,
	// or a prefix ending in "*": drop_spoof*); empty: any.
	Reasons []string
	// Prefixes: the source or the destination of the event's frame must
	// be in one of them; empty: any (frames without IP too).
	Prefixes []netip.Prefix
	// DropsOnly: drop events only (no trace events).
	DropsOnly bool
}

// ParseReasons checks reason names (or prefixes ending in "*") against
// the data plane's counters.
func ParseReasons(list []string) ([]string, error) {
	names := dataplane.StatNames()
	for _, r := range list {
		ok := false
		for _, n := range names {
			if n == r || strings.HasSuffix(r, "*") && strings.HasPrefix(n, strings.TrimSuffix(r, "*")) {
				ok = true
				break
			}
		}
		if !ok {
			return nil, fmt.Errorf("reason %q: not a counter of the data plane (one of %s)", r, strings.Join(names, ", "))
		}
	}
	return list, nil
}

// ParsePrefixes parses addresses and prefixes (an address is its /32).
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: want an address or a prefix (192.0.2.1, 192.0.2.0/24)", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Match reports whether the filter selects ev (t: its frame's tuple).
func (f Filter) Match(ev *dataplane.MonitorEvent, t dataplane.Tuple) bool {
	if f.DropsOnly && ev.Kind != dataplane.MonDrop {
		return false
	}
	if len(f.Reasons) > 0 && ev.Kind != dataplane.MonIn {
		ok := false
		for _, r := range f.Reasons {
			if r == ev.Reason || strings.HasSuffix(r, "*") && strings.HasPrefix(ev.Reason, strings.TrimSuffix(r, "*")) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(f.Prefixes) > 0 {
		if !t.OK {
			return false
		}
		ok := false
		for _, p := range f.Prefixes {
			if p.Contains(t.Src) || p.Contains(t.Dst) ||
				t.Inner != nil && (p.Contains(t.Inner.Src) || p.Contains(t.Inner.Dst)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// ProtoName names an IP protocol.
func ProtoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 47:
		return "gre"
	case 58:
		return "icmp6"
	}
	return fmt.Sprintf("proto-%d", p)
}

// TupleString prints a tuple ("-" when the frame holds no IP header; an
// IPv6 address with a port in brackets: "udp [2001:db8::1]:40000 >
// [2001:db8::2]:53");
// an NVGRE frame's as its outer header, its VSID and its inner tuple
// ("gre 192.0.2.10 > 192.0.2.1 vsid 7: tcp 198.18.0.5:40000 > 203.0.113.8:80").
func TupleString(t dataplane.Tuple) string {
	if !t.OK {
		return "-"
	}
	if t.Inner != nil {
		return fmt.Sprintf("gre %s > %s vsid %d: %s", t.Src, t.Dst, t.VSID, TupleString(*t.Inner))
	}
	switch t.Proto {
	case 6, 17:
		if t.Src.Is6() {
			// [2001:db8::1]:40000, as net.JoinHostPort writes it.
			return fmt.Sprintf("%s [%s]:%d > [%s]:%d", ProtoName(t.Proto), t.Src, t.Sport, t.Dst, t.Dport)
		}
		return fmt.Sprintf("%s %s:%d > %s:%d", ProtoName(t.Proto), t.Src, t.Sport, t.Dst, t.Dport)
	case 1, 58:
		return fmt.Sprintf("%s %s > %s type %d code %d", ProtoName(t.Proto), t.Src, t.Dst, t.Sport, t.Dport)
	}
	return fmt.Sprintf("%s %s > %s", ProtoName(t.Proto), t.Src, t.Dst)
}

// Line prints an event on one line: time (seconds of CLOCK_MONOTONIC),
// CPU, interface, kind, reason, tuple, length and the first bytes in hex
// (hexBytes of them; 0: none).
func Line(ev *dataplane.MonitorEvent, t dataplane.Tuple, ifname string, hexBytes int) string {
	reason := ev.Reason
	if reason == "" {
		reason = "-"
	}
	s := fmt.Sprintf("%.6f cpu%d %s %s %s %s len %d", ev.Time.Seconds(), ev.CPU, ifname, dataplane.KindName(ev.Kind), reason, TupleString(t), ev.Len)
	if hexBytes > 0 && len(ev.Data) > 0 {
		s += " | " + hex.EncodeToString(ev.Data[:min(hexBytes, len(ev.Data))])
	}
	return s
}

// Comment is an event's pcapng packet comment: kind, reason, CPU and the
// sequence number that pairs a frame's events.
func Comment(ev *dataplane.MonitorEvent) string {
	s := dataplane.KindName(ev.Kind)
	if ev.Reason != "" {
		s += " " + ev.Reason
	}
	return fmt.Sprintf("%s cpu %d seq %d", s, ev.CPU, ev.Seq)
}
