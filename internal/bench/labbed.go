package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// udpToEdge is a 64-byte UDP frame from the upstream router to the edge's
// Internet interface.
func (t *labBed) udpToEdge(src, dst string) ([]byte, error) {
	smac, err := t.rtr.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	dmac, err := t.edge.MAC("ext0")
	if err != nil {
		return nil, err
	}
	return udpFrame(smac.String(), dmac.String(), src, dst, 1024, 9, 64), nil
}

// measure runs the generator with frame (flows cycling over o.Flows
// source ports) for o.Duration after a 200 ms warm-up (the first packet
// of a flow may create state) and returns the packets per second the sink
// counted.
func (t *labBed) measure(frame []byte) (float64, error) {
	return t.measureCounted(frame, t.sinkPackets)
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
