package bench

import (
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
)

// The MACs of TestLabFrameCheck's frames.
const (
	tUL, tFab, tGW = "02:00:00:00:00:11", "02:00:00:00:00:12", "02:00:00:00:00:13"
	tHost          = "198.18.1.1"
)

// TestLabFrameCheck holds the lab suite's check of what the sink counts to
// the frames each measurement means: the IPv6 edge row's NVGRE frame with
// the UDP packet to the EIP inside passes, and so does nothing else (the
// packet not encapsulated, encapsulated to another host or EIP, with its
// hop limit not decremented, a broken UDP checksum, an IPv4 packet, a
// frame of another length); the kernel's IPv6 row takes the forwarded
// packet itself, not an NVGRE frame.
func TestLabFrameCheck(t *testing.T) {
	inner := func(dst string, hops uint8, size int) []byte {
		f := udpFrame6(tGW, "02:00:00:00:00:07", lab.ClientAddr6, dst, 1030, 9, size)
		f[14+7] = hops
		return f
	}
	edge := labFrameWant{srcMAC: mustMAC(tUL), dstMAC: mustMAC(tFab), nvgreTo: netip.MustParseAddr(tHost),
		src: netip.MustParseAddr(lab.ClientAddr6), dst: netip.MustParseAddr("2001:db8:e1::7"), hops: 63, size: 78, flows: 1024}
	kernel := edge
	kernel.nvgreTo, kernel.dst = netip.Addr{}, netip.MustParseAddr(labKernel6)
	nvgre := func(host string, in []byte) []byte { return nvgreFrame(tUL, tFab, "198.18.0.1", host, 5001<<8|7, in) }
	good := nvgre(tHost, inner("2001:db8:e1::7", 63, 78))
	badSum := append([]byte(nil), good...)
	badSum[len(badSum)-1] ^= 1
	v4 := nvgre(tHost, udpFrame(tGW, "02:00:00:00:00:07", lab.ClientAddr, labEIP4, 1030, 9, 78))
	v4[42+14+8] = 63
	for _, c := range []struct {
		name  string
		want  labFrameWant
		frame []byte
		ok    bool
	}{
		{"NVGRE, the packet to the IPv6 EIP inside", edge, good, true},
		{"the packet itself, not encapsulated", edge, inner("2001:db8:e1::7", 63, 78), false},
		{"NVGRE to another host", edge, nvgre("198.18.2.1", inner("2001:db8:e1::7", 63, 78)), false},
		{"NVGRE, a packet to another address inside", edge, nvgre(tHost, inner("2001:db8:e1::8", 63, 78)), false},
		{"NVGRE, the hop limit not decremented", edge, nvgre(tHost, inner("2001:db8:e1::7", 64, 78)), false},
		{"NVGRE, a broken UDP checksum", edge, badSum, false},
		{"NVGRE, an IPv4 packet inside", edge, v4, false},
		{"NVGRE, a frame of 80 bytes inside", edge, nvgre(tHost, inner("2001:db8:e1::7", 63, 80)), false},
		{"kernel: the forwarded packet", kernel, udpFrame6(tUL, tFab, lab.ClientAddr6, labKernel6, 1030, 9, 78), false}, // hop limit 64
		{"kernel: the forwarded packet, hop limit 63", kernel, func() []byte {
			f := udpFrame6(tUL, tFab, lab.ClientAddr6, labKernel6, 1030, 9, 78)
			f[14+7] = 63
			return f
		}(), true},
		{"kernel: NVGRE instead", kernel, nvgre(tHost, inner(labKernel6, 63, 78)), false},
	} {
		err := c.want.check(c.frame[:min(len(c.frame), 128)], len(c.frame))
		if (err == nil) != c.ok {
			t.Errorf("%s: check %v, want ok %v", c.name, err, c.ok)
		} else if err != nil {
			t.Logf("%s: %v", c.name, err)
		}
		if labForeign(c.frame) {
			t.Errorf("%s: taken for the lab's own traffic: a frame of it would be set aside, not failed", c.name)
		}
	}
	// What a run's sink caught once instead of the generator's first
	// frame: the edge's connection sync (TCP to port 7946 of another
	// edge): set aside, not failed.
	sync, err := hex.DecodeString("aaba240cab76c61b12011fd9080045000059555c400040065918c6120001c61200051f0a8f7b0a8de1276070a48f80180040562600000101080a14a85d5883d0ee7d0100000005c20043cc3a687ab3cd93e19d4b5dcaebe268217541bb31baf0cb8a42c33a400a")
	if err != nil {
		t.Fatal(err)
	}
	if !labForeign(sync) || edge.check(sync, len(sync)) == nil {
		t.Errorf("a connection-sync frame is not taken for the lab's own traffic")
	}
	if !labForeign(udpFrame6(tUL, tFab, "2001:db8:203::11", "2001:db8:e1::7", 1030, 9, 78)) {
		t.Errorf("UDP to port 9 from another source than the lab's client is not taken for other traffic")
	}
}

// buildLabBinaries builds the binaries the lab runs (as test/e2e does)
// into a directory of the test: azgate, azgate-node beside it, and
// azgate-lab.
func buildLabBinaries(t *testing.T) (azgate, azgateLab string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	for _, b := range []struct{ out, tags, pkg string }{
		{"azgate", "", "../../cmd/azgate"},
		{"azgate-node", "node", "../../cmd/azgate"},
		{"azgate-lab", "", "../../cmd/azgate-lab"},
	} {
		if out, err := exec.Command(goBin, "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.out, err, out)
		}
	}
	return filepath.Join(dir, "azgate"), filepath.Join(dir, "azgate-lab")
}

// TestLabIPv6Row runs bench lab briefly (one round of 300 ms
// measurements: the figures mean nothing) in a lab of its own: the IPv6
// rows must come out beside the IPv4 ones with packets counted at the
// sink in each, their per-packet row and the v6_vs_v4 comparison, and the
// frames the sink counted for the IPv6 edge row must be NVGRE to the EIP's
// host with the UDP packet to the IPv6 EIP inside (decoded here, apart
// from the suite's own check), those of the kernel's IPv6 row the
// forwarded packet itself. About a minute as root, with the builds;
// skipped without.
func TestLabIPv6Row(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab makes network namespaces and attaches XDP")
	}
	azgate, azgateLab := buildLabBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	frames := map[string][]byte{}
	rs, err := Lab(ctx, LabOptions{Binary: azgate, LabBinary: azgateLab, Duration: 300 * time.Millisecond, Rounds: 1,
		Out:      func(f string, a ...any) { t.Logf(f, a...) },
		Captured: func(row string, f []byte) { frames[row] = f }})
	if err != nil {
		t.Fatalf("bench lab: %v", err)
	}
	if left, _ := netns.List(benchLab("").Prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	rows := map[string]Result{}
	for _, r := range rs {
		t.Logf("%s: %.2f %s (above floor %.2f, ratio %.2f against %s)", r.Name, r.Value, r.Unit, r.AboveFloor, r.Ratio, r.Baseline)
		key := strings.Fields(r.Name)[0]
		if r.PerPacket {
			key += " per packet"
		}
		rows[key] = r
	}
	for _, n := range []string{"kernel_forwarding", "edge_xdp_eip_encap", "xdp_fwd", "kernel_forwarding6", "edge_xdp_eip_encap6", "xdp_fwd6"} {
		if r, ok := rows[n]; !ok || r.Unit != "packets/s" || r.Value <= 0 {
			t.Errorf("row %s: %+v, want packets counted at the sink", n, r)
		}
	}
	e6, k6, f6 := rows["edge_xdp_eip_encap6"], rows["kernel_forwarding6"], rows["xdp_fwd6"]
	if e6.Baseline != "kernel_forwarding6" || e6.Ratio != e6.Value/k6.Value || !strings.Contains(e6.Name, "78B") {
		t.Errorf("IPv6 edge row %+v is not against the IPv6 kernel forwarding (%+v) or not of 78-byte frames", e6, k6)
	}
	pp6, pp4 := rows["edge_xdp_eip_encap6 per packet"], rows["edge_xdp_eip_encap per packet"]
	if !pp6.PerPacket || pp6.Value != 1e9/e6.Value || pp6.Floor != 1e9/f6.Value || pp6.AboveFloor != 1e9/e6.Value-1e9/f6.Value {
		t.Errorf("IPv6 per-packet row %+v is not 1e9/pps above the IPv6 forwarder's floor (edge %.0f, forwarder %.0f packets/s)", pp6, e6.Value, f6.Value)
	}
	v := rows["v6_vs_v4"]
	if v.Value != pp6.AboveFloor || v.BaselineValue != pp4.AboveFloor || v.Baseline != pp4.Name || v.Ratio != ratio(pp6.AboveFloor, pp4.AboveFloor) {
		t.Errorf("comparison %+v does not compare %q (%.2f ns above its floor) with %q (%.2f)", v, pp6.Name, pp6.AboveFloor, pp4.Name, pp4.AboveFloor)
	}

	eip6, host := net.ParseIP(lab.EIPs6[0]), lab.HostUnderlay(1, 1)
	f := frames["edge_xdp_eip_encap6"]
	pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	var got []gopacket.LayerType
	for _, l := range pkt.Layers() {
		got = append(got, l.LayerType())
	}
	want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeGRE, layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeUDP, gopacket.LayerTypePayload}
	if len(f) != 78+42 || !equalTypes(got, want) {
		t.Fatalf("IPv6 edge row: the sink counted a %d-byte frame of %v, want 120 bytes of %v\n%x", len(f), got, want, f)
	}
	outer := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	gre := pkt.Layer(layers.LayerTypeGRE).(*layers.GRE)
	in6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if outer.Protocol != layers.IPProtocolGRE || !outer.DstIP.Equal(host.AsSlice()) || !gre.KeyPresent ||
		gre.Protocol != layers.EthernetTypeTransparentEthernetBridging {
		t.Errorf("IPv6 edge row: outer %v -> %v protocol %v, GRE key %v protocol %v: not NVGRE to az1-h1 (%v)", outer.SrcIP, outer.DstIP, outer.Protocol, gre.KeyPresent, gre.Protocol, host)
	}
	if !in6.DstIP.Equal(eip6) || !in6.SrcIP.Equal(net.ParseIP(lab.ClientAddr6)) || udp.DstPort != 9 {
		t.Errorf("IPv6 edge row: inner %v -> %v port %d, want %s -> %v port 9", in6.SrcIP, in6.DstIP, udp.DstPort, lab.ClientAddr6, eip6)
	}
	k := gopacket.NewPacket(frames["kernel_forwarding6"], layers.LayerTypeEthernet, gopacket.Default)
	if ip, ok := k.Layer(layers.LayerTypeIPv6).(*layers.IPv6); !ok || k.Layer(layers.LayerTypeGRE) != nil || !ip.DstIP.Equal(net.ParseIP(labKernel6)) {
		t.Errorf("kernel IPv6 row: the sink counted %x, want the forwarded IPv6 packet to %s", frames["kernel_forwarding6"], labKernel6)
	}
}

func equalTypes(a, b []gopacket.LayerType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
