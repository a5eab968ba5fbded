package bench

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
)

// LabOptions tune the lab suite.
type LabOptions struct {
	Binary   string        // azgate binary for the lab's roles (default: lab.DefaultBinary)
	Duration time.Duration // per measurement
	Rounds   int
	Flows    uint32
	Out      func(format string, a ...any)
	// LabBinary is the azgate-lab binary the lab runs its servers with
	// (default: this executable, which is azgate-lab outside tests).
	LabBinary string
	// Captured, if set, gets the frame the sink counted first in each
	// timed measurement of the lab suite (its first 128 bytes; the suite
	// has checked it already), named by the measurement's row.
	Captured func(row string, frame []byte)
}

// benchLab is the lab the suites build for themselves, apart from the
// README's lab so both can be up at once. DDoS detection is off: the
// suites send millions of packets a second to one EIP on purpose, and an
// automatic quarantine would move it mid-measurement (docs/ddos.md).
func benchLab(binary string) lab.Config {
	return lab.Config{Prefix: "azb-", StateDir: "/run/azgate-bench", Binary: binary, ControllerArgs: []string{"--ddos=false"}}
}

// The lab suite's frames and destinations: the smallest UDP frame of each
// family the suite sends (64 bytes over IPv4, RFC 2544's smallest
// Ethernet frame; 78 over IPv6, RFC 5180's: 62 bytes of headers and 16 of
// payload), the bound EIPs (az1-h1/g1) and, for the kernel's baseline,
// addresses that are no EIP, routed to the underlay.
const (
	labFrame4  = 64
	labFrame6  = 78
	labEIP4    = "198.51.100.7"
	labKernel4 = "198.19.11.1"         // inside 198.18.0.0/15, the edge's route to the underlay
	labKernel6 = "2001:db8:ff:11::1"   // routed to ul0 by the suite
	labNet6    = "2001:db8:ff:11::/64" // (the underlay has no IPv6 routes of its own)
)

// labFamily is one address family's measurements in the lab suite.
type labFamily struct {
	v6                bool
	toEIP, toKernel   []byte
	edge, kernel, fwd []float64
	// what the sink must count from the edge, the kernel and the
	// forwarder
	wantEdge, wantKernel, wantFwd labFrameWant
}

// Lab measures the packets per second one edge forwards from the Internet
// side to the underlay (the smallest UDP frame to a bound EIP,
// NVGRE-encapsulated toward its host over the IPv4 underlay), IPv4 and
// IPv6, next to plain kernel IP forwarding of the same family through the
// same namespaces and links in the same run, and to the simplest XDP
// forwarder (MAC rewrite and redirect) in the edge's place: the ceiling
// of the method. Traffic comes from the live-frames generator in the
// upstream router's namespace and is counted by an XDP sink on the
// underlay router's side of the edge's underlay link, so generator and
// sink cost the same in every measurement. Generator, edge and sink share
// one core: frames a program transmits into a veth are processed by the
// peer's NAPI on the sending core. (Threaded NAPI moves the edge to the
// other core but makes every figure slower and noisier.) Each round
// measures both families, in turns (IPv4 first in odd rounds, IPv6 in
// even ones); each figure is the median of its rounds. The first frame
// the sink counts in each measurement is checked against what the
// measurement means to count (NVGRE to the EIP's host with the packet to
// the EIP inside, or the forwarded packet itself), so a path that
// delivers something else fails the run, as one that delivers nothing.
func Lab(ctx context.Context, o LabOptions) ([]Result, error) {
	t, err := openLabBed(ctx, o, 5*time.Second, 1024)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	eip6 := lab.EIPs6[0]
	for _, eip := range []string{labEIP4, eip6} {
		if _, err := t.c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
			return nil, err
		}
		if _, err := t.lab.WaitAnswer(ctx, lab.EIPURL(eip), "hello from az1-h1-g1", 10*time.Second); err != nil {
			return nil, fmt.Errorf("the lab does not forward: %w", err)
		}
	}
	if err := t.attachSink(); err != nil {
		return nil, err
	}
	ulIdx, err := t.edge.Ifindex("ul0")
	if err != nil {
		return nil, err
	}
	ulMAC, err := t.edge.MAC("ul0")
	if err != nil {
		return nil, err
	}
	fabMAC, err := t.fab.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	if err := t.b.SetFwd(ulIdx, ulMAC, fabMAC); err != nil {
		return nil, err
	}
	// The kernel's IPv6 baseline: forwarding on, and a destination that is
	// no EIP routed to the underlay router (a permanent neighbour: the
	// sink passes ARP, not neighbour discovery).
	if err := t.edge.Sysctl("net.ipv6.conf.all.forwarding", "1"); err != nil {
		return nil, err
	}
	if err := t.edge.Route(labNet6, "", "ul0"); err != nil {
		return nil, err
	}
	if err := t.edge.Neigh("ul0", labKernel6, fabMAC.String()); err != nil {
		return nil, err
	}
	v4 := &labFamily{}
	v6 := &labFamily{v6: true}
	if v4.toEIP, err = t.udpToEdge(lab.ClientAddr, labEIP4, labFrame4); err != nil {
		return nil, err
	}
	if v4.toKernel, err = t.udpToEdge(lab.ClientAddr, labKernel4, labFrame4); err != nil {
		return nil, err
	}
	if v6.toEIP, err = t.udpToEdge(lab.ClientAddr6, eip6, labFrame6); err != nil {
		return nil, err
	}
	if v6.toKernel, err = t.udpToEdge(lab.ClientAddr6, labKernel6, labFrame6); err != nil {
		return nil, err
	}
	host := lab.HostUnderlay(1, 1)
	for _, f := range []*labFamily{v4, v6} {
		src, eip, kern, size := lab.ClientAddr, labEIP4, labKernel4, labFrame4
		if f.v6 {
			src, eip, kern, size = lab.ClientAddr6, eip6, labKernel6, labFrame6
		}
		ip := func(dst string, hops uint8) labFrameWant {
			return labFrameWant{srcMAC: ulMAC, dstMAC: fabMAC, src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst),
				hops: hops, size: size, flows: t.o.Flows}
		}
		f.wantEdge = ip(eip, 63)
		f.wantEdge.nvgreTo = host
		f.wantKernel = ip(kern, 63)
		f.wantFwd = ip(eip, 64)
	}
	for r := 0; r < t.o.Rounds; r++ {
		order := []*labFamily{v4, v6}
		if r%2 == 1 {
			order = []*labFamily{v6, v4}
		}
		for _, f := range order {
			if err := t.labRound(r, f); err != nil {
				return nil, err
			}
		}
	}
	rs4 := labRows("", labFrame4, "an EIP", v4)
	rs6 := labRows("6", labFrame6, "an IPv6 EIP", v6)
	pp4, pp6 := rs4[len(rs4)-1], rs6[len(rs6)-1]
	rs := append(rs4, rs6...)
	return append(rs, Result{Suite: "lab", Name: "v6_vs_v4 " + pp6.Name, Value: pp6.AboveFloor, Unit: "ns above the floor",
		Baseline: pp4.Name, BaselineValue: pp4.AboveFloor, Ratio: ratio(pp6.AboveFloor, pp4.AboveFloor),
		Target: "<= 1.10 (IPv6 within 10 % of IPv4 above the floor)",
		Note: fmt.Sprintf("%+.0f %% against %s above the floor (each against its own family's forwarder; frames of %d and %d bytes)",
			100*(ratio(pp6.AboveFloor, pp4.AboveFloor)-1), pp4.Name, labFrame6, labFrame4)}), nil
}

// labRound measures one family once: the edge, the kernel forwarding
// (edge program off ext0) and the minimal forwarder in the edge's place.
func (t *labBed) labRound(r int, f *labFamily) error {
	fam, sfx := "IPv4", ""
	if f.v6 {
		fam, sfx = "IPv6", "6"
	}
	pps, err := t.measureChecked(f.toEIP, "edge_xdp_eip_encap"+sfx, f.wantEdge)
	if err != nil {
		return fmt.Errorf("edge XDP, %s: %w", fam, err)
	}
	t.say("round %d: %s edge XDP %.2f Mpps", r+1, fam, pps/1e6)
	f.edge = append(f.edge, pps)

	// Baseline: the edge program off ext0, the kernel forwards.
	if err := t.withoutEdge(func() (err error) {
		pps, err = t.measureChecked(f.toKernel, "kernel_forwarding"+sfx, f.wantKernel)
		return err
	}); err != nil {
		return fmt.Errorf("kernel forwarding, %s: %w", fam, err)
	}
	t.say("round %d: %s kernel forwarding %.2f Mpps", r+1, fam, pps/1e6)
	f.kernel = append(f.kernel, pps)

	// Ceiling: the simplest XDP forwarder in the edge's place.
	if err := t.edge.Do(func() error { return dataplane.AttachPinned(t.b.Fwd(), "ext0", t.edgePin) }); err != nil {
		return err
	}
	pps, err = t.measureChecked(f.toEIP, "xdp_fwd"+sfx, f.wantFwd)
	if rerr := t.reattachEdge(); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("minimal XDP forwarder, %s: %w", fam, err)
	}
	t.say("round %d: %s minimal XDP forwarder %.2f Mpps", r+1, fam, pps/1e6)
	f.fwd = append(f.fwd, pps)
	return nil
}

// labRows are one family's rows (sfx "" for IPv4, "6" for IPv6), the
// per-packet one last.
func labRows(sfx string, size int, eip string, f *labFamily) []Result {
	kv, xv, fv := median(f.kernel), median(f.edge), median(f.fwd)
	fam := ""
	if sfx == "6" {
		fam = " over IPv6"
	}
	kernel, edge, fwd := "kernel_forwarding"+sfx, "edge_xdp_eip_encap"+sfx, "xdp_fwd"+sfx
	return []Result{
		{Suite: "lab", Name: fmt.Sprintf("%s (%dB UDP%s, edge namespace)", kernel, size, fam), Value: kv, Unit: "packets/s"},
		{Suite: "lab", Name: fmt.Sprintf("%s (%dB UDP to %s)", edge, size, eip), Value: xv, Unit: "packets/s",
			Baseline: kernel, BaselineValue: kv, Ratio: xv / kv, Target: ">= 3x"},
		{Suite: "lab", Name: fmt.Sprintf("%s (MAC rewrite + redirect, %dB%s, the ceiling)", fwd, size, fam), Value: fv, Unit: "packets/s",
			Baseline: kernel, BaselineValue: kv, Ratio: fv / kv},
		// The same as time per packet: the minimal forwarder is this
		// method's floor (it carries the generator's and the sink's cost,
		// on the same core), and the edge's cost above it is its own.
		{Suite: "lab", Name: edge + " per packet", Value: 1e9 / xv, Unit: "ns/packet",
			Baseline: fwd, BaselineValue: 1e9 / fv, Ratio: fv / xv, PerPacket: true, Floor: 1e9 / fv, AboveFloor: 1e9/xv - 1e9/fv,
			Note: "1e9 / packets/s; the floor is the minimal XDP forwarder measured the same way, on the same frames (it includes the generator's and the sink's cost: no separate harness figure)"},
	}
}
