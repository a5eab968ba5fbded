package edge

import (
	"context"
	"golang.org/x/sys/unix"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/bwstore/bwstoretest"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/model"
)

// TestBandwidthEnforcedThroughRedis: a limit a manager writes to a real
// per-zone Redis reaches the edge's real data plane and is enforced: the
// edge (Reconciler and bandwidth Host over a loaded edge object in the
// dptest namespace) starts from the static split, takes the pushed limit
// at its next poll, Internet -> EIP packets beyond it are dropped
// (drop_bw, the EIP's drop counters), and its next report in Redis shows
// the EIP's ingress and drop rates.
func TestBandwidthEnforcedThroughRedis(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads BPF objects and makes network namespaces")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	dp, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	ul, err := env.Node.Ifindex(dptest.UlDev)
	if err != nil {
		t.Fatal(err)
	}
	rds, _ := bwstoretest.Redis(t)

	eip := a("198.51.100.7")
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, ICMPSource: a(dptest.ExtAddr), ICMPRate: 100, ICMPBurst: 100,
		IfindexOf: func(netip.Addr) (uint32, error) { return uint32(ul), nil }}, dp)
	h, err := r.EnableBandwidth(BandwidthConfig{Store: rds, Zone: "pop", Interval: 100 * time.Millisecond}, newRateMeter(RateConfig{}), dp, quiet)
	if err != nil {
		t.Fatal(err)
	}
	load(t, r, 1,
		&model.AZ{Name: "az1"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a(dptest.UlAddr)}}},
		&model.EIP{Address: eip, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.BandwidthPackage{Name: "shop", Capacity: 100_000_000, EIPs: []model.PackageEIP{{Address: eip}}},
	)
	if _, ok, err := dp.Route(eip); !ok || err != nil || len(r.errs) > 0 {
		t.Fatalf("route of %v: %v %v; commit errors %v", eip, ok, err, r.errs)
	}
	ctx := context.Background()
	h.Step(ctx)
	if got, _ := dp.EIPBandwidths(); got[eip] != (dataplane.Bandwidth{Rate: 100_000_000, Burst: 250_000}) {
		t.Fatalf("static split in the data plane: %v, want the whole package (100 Mbit/s, 250 kB)", got)
	}

	// The zone manager pushes 1 MB/s with a burst of 15 packets.
	const pkt, rate, burst = 1000, 1_000_000, 15 * 1000
	if err := rds.WriteLimits(ctx, "pop", "edge-a1", 10*time.Second, bwstore.Limits{Generation: 1, Issued: time.Now(),
		Limits: []bwstore.Limit{{EIP: eip, Dir: bwstore.Ingress, RateBytes: rate, BurstBytes: burst}}}); err != nil {
		t.Fatal(err)
	}
	h.Step(ctx)
	if got, _ := dp.EIPBandwidths(); got[eip] != (dataplane.Bandwidth{Rate: 8 * rate, Burst: burst}) {
		t.Fatalf("after the push: %v, want 8 Mbit/s with a 15 kB burst", got)
	}

	// 100 packets of 1000 bytes back to back from the Internet.
	frame := udpFrame(t, "192.0.2.10", eip.String(), pkt)
	ext, err := env.Node.Ifindex(dptest.ExtDev)
	if err != nil {
		t.Fatal(err)
	}
	const xdpDrop = 1
	passed, dropped := 0, 0
	start := time.Now()
	err = env.Node.Do(func() error {
		for range 100 {
			ret, err := dp.Program().Run(&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512),
				Context: dptest.XDPContext(len(frame), ext)})
			if err != nil {
				return err
			}
			if ret == xdpDrop {
				dropped++
			} else {
				passed++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	// The buckets run on the kernel's tick (docs/dataplane.md, "Bandwidth
	// limits"): over t they admit at most burst + rate × (t + 2 ticks).
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res); err != nil {
		t.Fatal(err)
	}
	tick := time.Duration(res.Nano())
	maxPass := (burst + int(rate*(elapsed+2*tick).Seconds())) / pkt
	if passed < burst/pkt || passed > maxPass+1 {
		t.Fatalf("%d of 100 passed in %v, want %d..%d (burst %d B at %d B/s)", passed, elapsed, burst/pkt, maxPass+1, burst, rate)
	}
	stats, err := dp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := dp.EIPBandwidthDrops(eip)
	if err != nil || !ok || d.Packets != uint64(dropped) || stats["drop_bw"].Packets != uint64(dropped) {
		t.Fatalf("drops: EIP %+v %v %v, drop_bw %d; %d were dropped", d, ok, err, stats["drop_bw"].Packets, dropped)
	}

	// The next report (from the rx counters the rate meter reads) shows
	// the EIP's ingress and what its limit dropped.
	time.Sleep(60 * time.Millisecond) // past the meter's freshness
	h.Step(ctx)
	snap, err := rds.ReadReports(ctx, "pop")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Reports) != 1 || snap.Reports[0].Reporter != "edge-a1" || snap.Reports[0].EIP != eip ||
		snap.Reports[0].BytesPerSec == 0 || snap.Reports[0].DropBytesPerSec == 0 {
		t.Fatalf("reports %+v: want edge-a1's ingress and drops for %v", snap.Reports, eip)
	}
	t.Logf("%d passed, %d dropped in %v; reported %d B/s, %d dropped B/s", passed, dropped, elapsed,
		snap.Reports[0].BytesPerSec, snap.Reports[0].DropBytesPerSec)
}

// udpFrame is an Ethernet frame from the upstream router to the edge's
// Internet side carrying a UDP packet of n IP bytes.
func udpFrame(t *testing.T, src, dst string, n int) []byte {
	t.Helper()
	mac := func(s string) net.HardwareAddr {
		m, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	udp := &layers.UDP{SrcPort: 5000, DstPort: 5001}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload(make([]byte, n-28)))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
