package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Moves of an EIP under traffic (issue 19): pulled out of its prefix set
// into a dedicated set and released, quarantined and released, drifted to
// a guest on another host. Each is one API call; MeasureMove runs probe
// flows across it and says what they lost, how long their longest gap
// was, when the router (or the new guest) showed the move done and which
// edges forwarded the EIP's traffic afterwards.

// MoveOptions drive one move's measurement.
type MoveOptions struct {
	// Name is the move's name in the figures.
	Name string
	// EIP is the address that moves; Do makes the move (one API call).
	EIP string
	Do  func(context.Context) error
	// Route, if valid, is the prefix whose route the move changes: the
	// move is done when the router sends it to Via (nil: when it has no
	// route to it any more).
	Route netip.Prefix
	Via   []string
	// Answer, if set, is what the EIP's HTTP server answers once the move
	// is done (a drift: "hello from HOST-GUEST" of the new guest).
	Answer string
	// Forwarders are the edges that forward the EIP's traffic once the
	// move is done: Move.ForwardedBy is read after it.
	Forwarders []string
	// ProbeTargets are UDP echo addresses (ADDR:PORT); Flows per target,
	// one datagram each Interval (defaults 32, 10 ms).
	ProbeTargets []string
	Flows        int
	Interval     time.Duration
	// Settle is how long the probes run before the move (default 1 s);
	// After, how long they run once the move is done and the
	// forwarding edges were read (default 1 s); Timeout bounds the wait
	// for the move to be done (default 10 s).
	Settle, After, Timeout time.Duration
}

// Move is what one move did to traffic.
type Move struct {
	Name string `json:"name"`
	// Done: from the call to the router's route (or the new guest's
	// answer) showing the move done.
	Done time.Duration `json:"done_ns"`
	// StartedAt: the call began; DoneAt: the move was seen done.
	StartedAt, DoneAt time.Time    `json:"-"`
	Probes            []ProbeStats `json:"probes"`
	// Drops: the drop counters that grew while the probes ran.
	Drops []Drop `json:"drops,omitempty"`
	// ForwardedBy: the EIP's packets each edge forwarded (its per-EIP rx
	// counter) over one status period of each edge after the move was
	// done.
	ForwardedBy map[string]uint64 `json:"forwarded_by"`
}

// Gap is the longest traffic gap any probe flow saw.
func (m Move) Gap() time.Duration { return maxGap(m.Probes) }

// Lost is the probe datagrams sent and never answered.
func (m Move) Lost() uint64 { return sumLost(m.Probes) }

// Sent is the probe datagrams sent.
func (m Move) Sent() uint64 {
	var n uint64
	for _, p := range m.Probes {
		n += p.Sent
	}
	return n
}

// Unrecovered counts the probe flows whose replies had stopped for good
// when the probes stopped.
func (m Move) Unrecovered() int {
	n := 0
	for _, p := range m.Probes {
		n += p.Unrecovered
	}
	return n
}

// Strays are the edges outside forwarders that forwarded any of the
// EIP's packets in ForwardedBy.
func (m Move) Strays(forwarders []string) map[string]uint64 {
	out := map[string]uint64{}
	for e, n := range m.ForwardedBy {
		if n > 0 && !slices.Contains(forwarders, e) {
			out[e] = n
		}
	}
	return out
}

// MeasureMove runs probes, makes the move, waits until it is done (the
// route, the answer), reads which edges forward the EIP's traffic, lets
// traffic run a little longer and stops the probes.
func (l *Lab) MeasureMove(ctx context.Context, o MoveOptions) (Move, error) {
	if o.Flows == 0 {
		o.Flows = 32
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Settle == 0 {
		o.Settle = time.Second
	}
	if o.After == 0 {
		o.After = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	m := Move{Name: o.Name}
	d0 := l.SnapshotDrops()
	p, err := l.StartProbes(o.ProbeTargets, o.Flows, o.Interval)
	if err != nil {
		return m, err
	}
	stop := func() {
		m.Probes = p.Stop()
		m.Drops = DropsBetween(d0, l.SnapshotDrops())
	}
	time.Sleep(o.Settle)
	m.StartedAt = time.Now()
	if err := o.Do(ctx); err != nil {
		stop()
		return m, fmt.Errorf("%s: %w", o.Name, err)
	}
	if o.Route.IsValid() {
		if _, err := l.WaitRoute(ctx, o.Route, o.Via, o.Timeout); err != nil {
			stop()
			return m, fmt.Errorf("%s: %w", o.Name, err)
		}
	}
	if o.Answer != "" {
		if _, err := l.WaitAnswer(ctx, "http://"+o.EIP+"/", o.Answer, o.Timeout); err != nil {
			stop()
			return m, fmt.Errorf("%s: %w", o.Name, err)
		}
	}
	m.DoneAt = time.Now()
	m.Done = m.DoneAt.Sub(m.StartedAt)
	// Packets the router sent before the route changed are forwarded
	// within microseconds; 200 ms is far past them.
	m.ForwardedBy, err = l.EIPForwarded(ctx, o.EIP, m.DoneAt.Add(200*time.Millisecond), 15*time.Second)
	if err != nil {
		stop()
		return m, fmt.Errorf("%s: %w", o.Name, err)
	}
	time.Sleep(o.After)
	stop()
	return m, nil
}

// EIPForwarded waits for every edge to publish a status newer than since,
// then for each to publish its next one, and returns how many of the
// EIP's packets each edge forwarded between its two (edges publish every
// 2 s): who forwards the EIP's traffic now.
func (l *Lab) EIPForwarded(ctx context.Context, eip string, since time.Time, timeout time.Duration) (map[string]uint64, error) {
	type seen struct {
		at time.Time
		rx uint64
	}
	edges := l.Topo.NodesByRole("edge")
	first := map[string]seen{}
	out := map[string]uint64{}
	deadline := time.Now().Add(timeout)
	for {
		st, err := l.NodeStatuses(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range edges {
			s, ok := st[n.Name]
			if !ok || !s.Updated.After(since) {
				continue
			}
			f, ok := first[n.Name]
			switch {
			case !ok:
				first[n.Name] = seen{s.Updated, s.EIPs[eip].RxPackets}
			case s.Updated.After(f.at):
				if _, done := out[n.Name]; !done {
					// A counter that went back started again (an edge
					// restarted, or dropped the EIP and its counter:
					// then it forwards none of it).
					rx := s.EIPs[eip].RxPackets
					if rx >= f.rx {
						rx -= f.rx
					}
					out[n.Name] = rx
				}
			}
		}
		if len(out) == len(edges) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d edges published two statuses after %s within %v", len(out), len(edges), since.Format("15:04:05.000"), timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
