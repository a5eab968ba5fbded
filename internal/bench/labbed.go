package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netlab"
)

// labBed is what the lab suites share: a lab of their own, the bench
// programs, the upstream router (where the generator runs), the underlay
// router (where the sink counts) and the edge's namespace.
type labBed struct {
	o        LabOptions
	say      func(string, ...any)
	cfg      lab.Config
	lab      *lab.Lab
	c        *client.Client
	b        *dataplane.Bench
	rtr, fab *netlab.Node
	edge     *netlab.Node
	edgePin  string
	closers  []func()
}

// openLabBed brings the bench lab up (o's zero fields get the defaults
// given) and opens the nodes the suites use.
func openLabBed(ctx context.Context, o LabOptions, dur time.Duration, flows uint32) (_ *labBed, err error) {
	if o.Duration == 0 {
		o.Duration = dur
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Flows == 0 {
		o.Flows = flows
	}
	t := &labBed{o: o, say: o.Out, cfg: benchLab(o.Binary)}
	t.cfg.LabBinary = o.LabBinary
	if t.say == nil {
		t.say = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if err = t.cfg.CheckBinaries(); err != nil {
		return nil, err
	}
	lab.Down(t.cfg)
	t.say("bringing up a lab (prefix %s)", t.cfg.Prefix)
	if t.lab, err = lab.Up(ctx, t.cfg); err != nil {
		return nil, err
	}
	t.closers = append(t.closers, func() { lab.Down(t.cfg) })
	if t.c, err = t.lab.Client(); err != nil {
		return nil, err
	}
	if t.b, err = dataplane.LoadBench(); err != nil {
		return nil, err
	}
	t.closers = append(t.closers, func() { t.b.Close() })
	for _, n := range []struct {
		node **netlab.Node
		name string
	}{{&t.rtr, "rtr"}, {&t.fab, "fab"}, {&t.edge, "edge-a1"}} {
		if *n.node, err = netlab.OpenNode(t.cfg.Prefix + n.name); err != nil {
			return nil, err
		}
		nd := *n.node
		t.closers = append(t.closers, func() { nd.Close() })
	}
	t.edgePin = dataplane.NodePinDir(t.cfg.Prefix + "edge-a1")
	return t, nil
}

// attachSink puts the sink on the underlay router's side of the edge's
// underlay link, in place of the lab's XDP_PASS program: from then on
// nothing the edge sends into the underlay reaches a host.
func (t *labBed) attachSink() error {
	if err := t.fab.Do(func() error { return dataplane.AttachPinned(t.b.Sink(), "edge-a1", t.lab.PassPinDir("fab")) }); err != nil {
		return fmt.Errorf("attach the sink: %w", err)
	}
	return nil
}

// Close takes the lab down and releases what openLabBed opened.
func (t *labBed) Close() {
	for i := len(t.closers) - 1; i >= 0; i-- {
		t.closers[i]()
	}
	t.closers = nil
}

// udpToEdge is a UDP frame of size bytes from the upstream router to the
// edge's Internet interface, src to dst (IPv4 or IPv6), source port 1024
// (the generator's first flow), destination port 9.
func (t *labBed) udpToEdge(src, dst string, size int) ([]byte, error) {
	smac, err := t.rtr.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	dmac, err := t.edge.MAC("ext0")
	if err != nil {
		return nil, err
	}
	if netip.MustParseAddr(src).Is6() {
		return udpFrame6(smac.String(), dmac.String(), src, dst, 1024, 9, size), nil
	}
	return udpFrame(smac.String(), dmac.String(), src, dst, 1024, 9, size), nil
}

// measure runs the generator with frame (flows cycling over o.Flows
// source ports) for o.Duration after a 200 ms warm-up (the first packet
// of a flow may create state) and returns the packets per second the sink
// counted.
func (t *labBed) measure(frame []byte) (float64, error) {
	return t.measureCounted(frame, t.sinkPackets)
}

// measureChecked is measure, and the first frame of the generator's
// packets the sink counts in the timed run must be want (an error names
// row): a measurement that counts frames of another path is an error,
// not a figure. The sink also counts the lab's own traffic on the link
// (the edges' connection sync, ...: a few packets a second against
// millions); a frame of it, caught instead, is set aside and the sink
// asked again over a short untimed run, up to 5 times. o.Captured, if
// set, gets the frame checked.
func (t *labBed) measureChecked(frame []byte, row string, want labFrameWant) (float64, error) {
	pps, err := t.measureRun(frame, t.sinkPackets, t.b.CaptureNext)
	if err != nil {
		return 0, err
	}
	for try := 0; ; try++ {
		f, n, err := t.b.Captured()
		if err != nil {
			return 0, err
		}
		if f == nil {
			return 0, fmt.Errorf("%s: the sink copied no frame of the measurement", row)
		}
		if labForeign(f) {
			if try == 5 {
				return 0, fmt.Errorf("%s: the sink caught no frame of the generator's packets in 6 tries (the last: %d bytes: %x)", row, n, f)
			}
			if err := t.b.CaptureNext(); err != nil {
				return 0, err
			}
			g, err := NewGenerator(t.b, t.rtr, "edge-a1", frame, t.o.Flows, 1024)
			if err != nil {
				return 0, err
			}
			if _, err := g.Run(10 * time.Millisecond); err != nil {
				return 0, err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err := want.check(f, n); err != nil {
			return 0, fmt.Errorf("%s: the sink counted another path's frames: %w (%d bytes: %x)", row, err, n, f)
		}
		if t.o.Captured != nil {
			t.o.Captured(row, f)
		}
		return pps, nil
	}
}

// sinkPackets is the packets the XDP sink counted.
func (t *labBed) sinkPackets() (uint64, error) {
	c, err := t.b.SinkCount()
	return c.Packets, err
}

// measureCounted runs the generator with frame for o.Duration after a
// 200 ms warm-up and returns what count grew by per second. A path that
// moves nothing during the warm-up is an error, not a measurement of 0.
func (t *labBed) measureCounted(frame []byte, count func() (uint64, error)) (float64, error) {
	return t.measureRun(frame, count, nil)
}

// measureRun is measureCounted calling armed, if not nil, between the
// warm-up and the timed run.
func (t *labBed) measureRun(frame []byte, count func() (uint64, error), armed func() error) (float64, error) {
	g, err := NewGenerator(t.b, t.rtr, "edge-a1", frame, t.o.Flows, 1024)
	if err != nil {
		return 0, err
	}
	before, err := count()
	if err != nil {
		return 0, err
	}
	if _, err := g.Run(200 * time.Millisecond); err != nil {
		return 0, err
	}
	mid, err := count()
	if err != nil {
		return 0, err
	}
	if mid == before {
		return 0, errors.New("the counter did not move during the warm-up: the path is not the measured one (does it forward?)")
	}
	if armed != nil {
		if err := armed(); err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	if _, err := g.Run(t.o.Duration); err != nil {
		return 0, err
	}
	el := time.Since(t0)
	time.Sleep(100 * time.Millisecond) // let the last frames drain
	after, err := count()
	if err != nil {
		return 0, err
	}
	return float64(after-mid) / el.Seconds(), nil
}

// labFrameWant is what a frame the sink counts in a lab measurement must
// be: from the edge's underlay interface to the underlay router's side
// (srcMAC, dstMAC), carrying the generator's UDP packet (size bytes as
// sent, src to dst, port 9 from one of the flows' source ports, its UDP
// checksum valid over IPv6) with TTL or hop limit hops; with nvgreTo
// valid, inside NVGRE (outer IPv4 to that host, GRE key present,
// transparent Ethernet bridging), 42 bytes more.
type labFrameWant struct {
	srcMAC, dstMAC net.HardwareAddr
	nvgreTo        netip.Addr
	src, dst       netip.Addr
	hops           uint8
	size           int
	flows          uint32
}

// check holds frame (the first bytes of one of length bytes) to w.
func (w labFrameWant) check(frame []byte, length int) error {
	want := w.size
	if w.nvgreTo.IsValid() {
		want += 42
	}
	if length != want || len(frame) != min(length, 128) {
		return fmt.Errorf("a %d-byte frame (%d copied), want %d bytes", length, len(frame), want)
	}
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		return fmt.Errorf("does not decode: %v", el.Error())
	}
	ls := pkt.Layers()
	next := func(lt gopacket.LayerType) (gopacket.Layer, error) {
		if len(ls) == 0 || ls[0].LayerType() != lt {
			return nil, fmt.Errorf("no %v where expected (layers %v)", lt, layerTypes(pkt.Layers()))
		}
		l := ls[0]
		ls = ls[1:]
		return l, nil
	}
	l, err := next(layers.LayerTypeEthernet)
	if err != nil {
		return err
	}
	if eth := l.(*layers.Ethernet); !bytes.Equal(eth.SrcMAC, w.srcMAC) || !bytes.Equal(eth.DstMAC, w.dstMAC) {
		return fmt.Errorf("Ethernet %v -> %v, want %v -> %v", eth.SrcMAC, eth.DstMAC, w.srcMAC, w.dstMAC)
	}
	if w.nvgreTo.IsValid() {
		if l, err = next(layers.LayerTypeIPv4); err != nil {
			return err
		}
		if ip := l.(*layers.IPv4); ip.Protocol != layers.IPProtocolGRE || !ip.DstIP.Equal(w.nvgreTo.AsSlice()) {
			return fmt.Errorf("outer IPv4 protocol %v to %v, want GRE to %v", ip.Protocol, ip.DstIP, w.nvgreTo)
		}
		if l, err = next(layers.LayerTypeGRE); err != nil {
			return err
		}
		if gre := l.(*layers.GRE); !gre.KeyPresent || gre.Protocol != layers.EthernetTypeTransparentEthernetBridging {
			return fmt.Errorf("GRE key present %v, protocol %v: not NVGRE", gre.KeyPresent, gre.Protocol)
		}
		if _, err = next(layers.LayerTypeEthernet); err != nil {
			return err
		}
	}
	var udp *layers.UDP
	if w.src.Is6() {
		if l, err = next(layers.LayerTypeIPv6); err != nil {
			return err
		}
		ip := l.(*layers.IPv6)
		if !ip.SrcIP.Equal(w.src.AsSlice()) || !ip.DstIP.Equal(w.dst.AsSlice()) || ip.HopLimit != w.hops || ip.NextHeader != layers.IPProtocolUDP {
			return fmt.Errorf("IPv6 %v -> %v hop limit %d next header %v, want %v -> %v hop limit %d UDP", ip.SrcIP, ip.DstIP, ip.HopLimit, ip.NextHeader, w.src, w.dst, w.hops)
		}
		if l, err = next(layers.LayerTypeUDP); err != nil {
			return err
		}
		udp = l.(*layers.UDP)
		if !udp6ChecksumOK(w.src, w.dst, ip.Payload) {
			return fmt.Errorf("UDP checksum %#04x is not the datagram's", udp.Checksum)
		}
	} else {
		if l, err = next(layers.LayerTypeIPv4); err != nil {
			return err
		}
		ip := l.(*layers.IPv4)
		if !ip.SrcIP.Equal(w.src.AsSlice()) || !ip.DstIP.Equal(w.dst.AsSlice()) || ip.TTL != w.hops || ip.Protocol != layers.IPProtocolUDP {
			return fmt.Errorf("IPv4 %v -> %v TTL %d protocol %v, want %v -> %v TTL %d UDP", ip.SrcIP, ip.DstIP, ip.TTL, ip.Protocol, w.src, w.dst, w.hops)
		}
		if l, err = next(layers.LayerTypeUDP); err != nil {
			return err
		}
		udp = l.(*layers.UDP)
	}
	if sp := uint32(udp.SrcPort); udp.DstPort != 9 || sp < 1024 || sp >= 1024+w.flows {
		return fmt.Errorf("UDP %d -> %d, want one of the %d flows' ports from 1024 -> 9", udp.SrcPort, udp.DstPort, w.flows)
	}
	return nil
}

// labForeign: frame carries no generator's packet (no UDP to port 9 from
// the lab's client, IPv4 or IPv6, at any depth): the lab's own traffic.
// A frame that does not decode is not foreign: its check fails.
func labForeign(frame []byte) bool {
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if pkt.ErrorLayer() != nil {
		return false
	}
	var src net.IP
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			src = l.SrcIP
		case *layers.IPv6:
			src = l.SrcIP
		case *layers.UDP:
			if l.DstPort == 9 && (src.Equal(net.ParseIP(lab.ClientAddr)) || src.Equal(net.ParseIP(lab.ClientAddr6))) {
				return false
			}
		}
	}
	return true
}

func layerTypes(ls []gopacket.Layer) []gopacket.LayerType {
	var ts []gopacket.LayerType
	for _, l := range ls {
		ts = append(ts, l.LayerType())
	}
	return ts
}

// udp6ChecksumOK: the UDP datagram dg (header and payload) from src to
// dst has a valid checksum (nonzero; the one's complement sum over the
// pseudo-header and the datagram comes to all ones).
func udp6ChecksumOK(src, dst netip.Addr, dg []byte) bool {
	if len(dg) < 8 || dg[6] == 0 && dg[7] == 0 {
		return false
	}
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	sum += uint32(len(dg)) + 17
	add(dg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum == 0xffff
}

// withoutEdge runs f with the edge program off the edge's Internet
// interface (the kernel forwards), and puts it back.
func (t *labBed) withoutEdge(f func() error) error {
	if err := dataplane.DetachPinned(t.edgePin, "ext0"); err != nil {
		return err
	}
	err := f()
	if rerr := t.reattachEdge(); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// reattachEdge puts the edge program back on ext0: it loads the program
// against the node's pinned maps (so it shares their state) and attaches
// it through a new pinned link, as the edge daemon does on start.
func (t *labBed) reattachEdge() error {
	return t.edge.Do(func() error {
		e, err := dataplane.LoadEdge(dataplane.LoadOptions{PinDir: t.edgePin})
		if err != nil {
			return err
		}
		defer e.Close()
		return e.Attach("ext0")
	})
}
