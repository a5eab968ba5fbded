package monitor

import (
	"encoding/binary"
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

// nvgreFrame wraps inner (an Ethernet frame) in NVGRE from src to dst:
// Ethernet, IPv4 (protocol 47), GRE with flags, protocol proto and, with
// the key bit, the key vsid<<8.
func nvgreFrame(src, dst string, flags, proto uint16, vsid uint32, inner []byte) []byte {
	outer := udpFrame(src, dst, 0, 0)[:14+20]
	outer[14+9] = 47
	g := binary.BigEndian.AppendUint16(nil, flags)
	g = binary.BigEndian.AppendUint16(g, proto)
	if flags&0x2000 != 0 {
		g = binary.BigEndian.AppendUint32(g, vsid<<8)
	}
	return append(append(outer, g...), inner...)
}

// TestNVGRETuple: an NVGRE frame's tuple holds the guest's inner flow and
// the VSID; --addr matches the guest's address as well as the tunnel's;
// a GRE frame that is not NVGRE (no key, not Ethernet), or whose inner
// header is cut off, has the outer tuple only.
func TestNVGRETuple(t *testing.T) {
	guest := udpFrame("198.18.0.5", "203.0.113.8", 40000, 53)
	frame := nvgreFrame("192.0.2.10", "192.0.2.1", 0x2000, 0x6558, 7, guest)
	tu := dataplane.ParseTuple(frame)
	if got, want := TupleString(tu), "gre 192.0.2.10 > 192.0.2.1 vsid 7: udp 198.18.0.5:40000 > 203.0.113.8:53"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	ev := dataplane.MonitorEvent{Kind: dataplane.MonDrop, Reason: "drop_fib", Data: frame}
	for _, c := range []struct {
		addr string
		want bool
	}{{"198.18.0.5", true}, {"203.0.113.0/24", true}, {"192.0.2.10", true}, {"198.51.100.1", false}} {
		p, err := ParsePrefixes([]string{c.addr})
		if err != nil {
			t.Fatal(err)
		}
		if got := (Filter{Prefixes: p}).Match(&ev, tu); got != c.want {
			t.Errorf("--addr %s: %v, want %v", c.addr, got, c.want)
		}
	}
	// The first 128 bytes are all an event holds: the inner ports are at
	// byte 84, well within.
	if tu := dataplane.ParseTuple(frame[:dataplane.MonitorSnap]); tu.Inner == nil || tu.Inner.Dport != 53 {
		t.Errorf("snapped frame: %+v, want the inner tuple", tu)
	}
	for name, f := range map[string][]byte{
		"no key":          nvgreFrame("192.0.2.10", "192.0.2.1", 0, 0x6558, 0, guest),
		"not Ethernet":    nvgreFrame("192.0.2.10", "192.0.2.1", 0x2000, 0x0800, 7, guest[14:]),
		"inner cut off":   nvgreFrame("192.0.2.10", "192.0.2.1", 0x2000, 0x6558, 7, guest[:20]),
		"GRE cut off":     nvgreFrame("192.0.2.10", "192.0.2.1", 0x2000, 0x6558, 7, nil)[:14+20+6],
		"sequence number": nvgreFrame("192.0.2.10", "192.0.2.1", 0x3000, 0x6558, 7, append([]byte{0, 0, 0, 1}, guest...)),
	} {
		tu := dataplane.ParseTuple(f)
		if !tu.OK || tu.Proto != 47 {
			t.Errorf("%s: %+v, want the outer gre tuple", name, tu)
		}
		if wantInner := name == "sequence number"; (tu.Inner != nil) != wantInner {
			t.Errorf("%s: inner %+v, want inner %v", name, tu.Inner, wantInner)
		}
	}
}

// v6Frame is Ethernet (with tags 802.1Q tags), and IPv6 from src to dst,
// first next header nh, then payload (extension headers and L4).
func v6Frame(tags int, src, dst string, nh uint8, payload []byte) []byte {
	f := []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2}
	for range tags {
		f = append(f, 0x81, 0x00, 0x00, 0x07)
	}
	f = append(f, 0x86, 0xdd)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, nh, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(payload)))
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(f, ip...), payload...)
}

// TestIPv6Tuple: an IPv6 frame's tuple has its addresses and, past the
// extension headers, the ports of TCP/UDP or ICMPv6's type and code; a
// later fragment has none; --addr matches IPv6 prefixes.
func TestIPv6Tuple(t *testing.T) {
	udp := []byte{0x9c, 0x40, 0, 53, 0, 8, 0, 0}
	dstOpts := []byte{17, 0, 1, 4, 0, 0, 0, 0} // destination options (8 bytes), then UDP
	for _, c := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"udp", v6Frame(0, "2001:db8:1::10", "2001:db8:2::1", 17, udp), "udp [2001:db8:1::10]:40000 > [2001:db8:2::1]:53"},
		{"tagged, after destination options", v6Frame(2, "2001:db8:1::10", "2001:db8:2::1", 60, append(dstOpts, udp...)),
			"udp [2001:db8:1::10]:40000 > [2001:db8:2::1]:53"},
		{"tcp in a first fragment", v6Frame(0, "2001:db8:1::10", "2001:db8:2::1", 44, append([]byte{6, 0, 0, 1, 0, 0, 0, 9}, 0x9c, 0x40, 0x01, 0xbb)),
			"tcp [2001:db8:1::10]:40000 > [2001:db8:2::1]:443"},
		{"a later fragment", v6Frame(0, "2001:db8:1::10", "2001:db8:2::1", 44, append([]byte{6, 0, 0x05, 0xc8, 0, 0, 0, 9}, 0x9c, 0x40, 0x01, 0xbb)),
			"tcp [2001:db8:1::10]:0 > [2001:db8:2::1]:0"},
		{"ndp neighbour solicitation", v6Frame(0, "fe80::1", "ff02::1:ff00:1", 58, []byte{135, 0, 0, 0, 0, 0, 0, 0}),
			"icmp6 fe80::1 > ff02::1:ff00:1 type 135 code 0"},
		{"cut in the fixed header", v6Frame(0, "2001:db8:1::10", "2001:db8:2::1", 17, nil)[:14+39], "-"},
	} {
		if got := TupleString(dataplane.ParseTuple(c.frame)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	frame := v6Frame(0, "2001:db8:1::10", "2001:db8:2::1", 17, udp)
	ev := dataplane.MonitorEvent{Kind: dataplane.MonDrop, Reason: "drop_ip6_rh0", Data: frame}
	for _, c := range []struct {
		addr string
		want bool
	}{{"2001:db8:1::10", true}, {"2001:db8:2::/48", true}, {"2001:db8:3::/48", false}, {"192.0.2.1", false}} {
		p, err := ParsePrefixes([]string{c.addr})
		if err != nil {
			t.Fatal(err)
		}
		if got := (Filter{Prefixes: p, Reasons: []string{"drop_ip6*"}}).Match(&ev, dataplane.ParseTuple(frame)); got != c.want {
			t.Errorf("--addr %s: %v, want %v", c.addr, got, c.want)
		}
	}
	if got, want := Line(&ev, dataplane.ParseTuple(frame), "ext0", 0), "0.000000 cpu0 ext0 drop drop_ip6_rh0 udp [2001:db8:1::10]:40000 > [2001:db8:2::1]:53 len 0"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
