package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Failure causes an edge of the prefix set can be put through.
const (
	// CauseDrain: azgate edge drain (routes withdrawn, the edge keeps
	// forwarding what still reaches it).
	CauseDrain = "drain"
	// CauseSIGTERM: the edge withdraws, waits for the withdrawal to take
	// effect, then stops (its pinned data plane stays).
	CauseSIGTERM = "sigterm"
	// CauseSIGKILL: the edge process dies at once; the kernel closes its
	// BGP sockets (the router sees the session end), the pinned data plane
	// stays.
	CauseSIGKILL = "sigkill"
	// CauseLinkDown: the edge's two links go down (a cable pulled, a
	// machine lost): the router loses the carrier.
	CauseLinkDown = "link-down"
	// CauseHang: the edge process is frozen (SIGSTOP): its sessions stay
	// open and silent, and only the hold timer ends them.
	CauseHang = "hang"
)

// Causes lists every failure cause in the order the figures report them.
var Causes = []string{CauseDrain, CauseSIGTERM, CauseSIGKILL, CauseLinkDown, CauseHang}

// FailEdge puts an edge through a failure and returns how to bring it
// back.
func (l *Lab) FailEdge(ctx context.Context, edge, cause string) (restore func(context.Context) error, err error) {
	switch cause {
	case CauseDrain:
		if err := l.SetDrained(ctx, edge, true); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return l.SetDrained(ctx, edge, false) }, nil
	case CauseSIGTERM, CauseSIGKILL:
		sig := syscall.SIGTERM
		if cause == CauseSIGKILL {
			sig = syscall.SIGKILL
		}
		pid, err := l.SignalRole(edge, sig)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			if err := WaitGone(pid, 30*time.Second); err != nil {
				return err
			}
			return l.StartRole(edge)
		}, nil
	case CauseLinkDown:
		if err := l.SetEdgeLinks(edge, false); err != nil {
			return nil, err
		}
		return func(context.Context) error { return l.SetEdgeLinks(edge, true) }, nil
	case CauseHang:
		if _, err := l.SignalRole(edge, syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func(context.Context) error {
			_, err := l.SignalRole(edge, syscall.SIGCONT)
			return err
		}, nil
	}
	return nil, fmt.Errorf("unknown failure cause %q (want one of %v)", cause, Causes)
}

// FailoverTimes are the BGP timers of the lab's sets.
type FailoverTimes struct {
	HoldTime  int `json:"hold_time_s"`
	Keepalive int `json:"keepalive_s"`
}

// Failover is what one failure (and the edge's return) did to traffic.
type Failover struct {
	Cause string        `json:"cause"`
	Edge  string        `json:"edge"`
	BGP   FailoverTimes `json:"bgp"`
	// Withdrawn: from the failure to the router's route leaving the
	// edge out (-1: it never did within the wait).
	Withdrawn time.Duration `json:"withdrawn_ns"`
	Probes    []ProbeStats  `json:"probes"`
	// Rejoined: from the restore to the router's route holding the edge
	// again; ReturnProbes: what traffic saw meanwhile.
	Rejoined     time.Duration `json:"rejoined_ns"`
	ReturnProbes []ProbeStats  `json:"return_probes"`
	// ConnsLost: long-lived TCP connections that failed during the
	// failure or the return, by target.
	ConnsLost []ConnsLost `json:"conns_lost,omitempty"`
	// When each step happened, to place the probes' losses.
	FailedAt, WithdrawnAt, RestoredAt, RejoinedAt time.Time `json:"-"`
	// A restarted edge (SIGTERM, SIGKILL): when its connection sync said
	// it held a full copy and when it began to announce, from its log
	// (zero: not seen).
	SyncReadyAt, AnnouncedAt time.Time `json:"-"`
	// Drops and ReturnDrops: the drop counters (SnapshotDrops) that grew
	// in the failure phase and in the return, to tell where lost probes
	// went.
	Drops       []Drop `json:"drops,omitempty"`
	ReturnDrops []Drop `json:"return_drops,omitempty"`
}

// Messages of the edge's log that MeasureFailover looks for.
const (
	logSyncReady = "connection sync ready"
	logAnnounces = "edge announces its set's routes"
)

// Gap is the longest traffic gap any probe flow saw in the failure.
func (f Failover) Gap() time.Duration { return maxGap(f.Probes) }

// ReturnGap is the longest gap any probe flow saw in the return.
func (f Failover) ReturnGap() time.Duration { return maxGap(f.ReturnProbes) }

// Lost is the probe datagrams lost in the failure.
func (f Failover) Lost() uint64 { return sumLost(f.Probes) }

// ReturnLost is the probe datagrams lost in the return.
func (f Failover) ReturnLost() uint64 { return sumLost(f.ReturnProbes) }

// Unrecovered counts the probe flows whose replies had not come back by
// the end of the failure phase (their gap is a lower bound).
func (f Failover) Unrecovered() int {
	n := 0
	for _, p := range f.Probes {
		n += p.Unrecovered
	}
	return n
}

// LostConns counts the connections lost.
func (f Failover) LostConns() int {
	n := 0
	for _, c := range f.ConnsLost {
		n += c.Lost
	}
	return n
}

func maxGap(ps []ProbeStats) time.Duration {
	var g time.Duration
	for _, p := range ps {
		g = max(g, p.Gap)
	}
	return g
}

func sumLost(ps []ProbeStats) uint64 {
	var n uint64
	for _, p := range ps {
		n += p.Lost
	}
	return n
}

// FailoverOptions drive one measurement.
type FailoverOptions struct {
	Edge  string
	Cause string
	// ProbeTargets are UDP echo addresses (ADDR:PORT); Flows per target,
	// one datagram each Interval.
	ProbeTargets []string
	Flows        int
	Interval     time.Duration
	// Conns, if set, are long-lived connections whose losses are counted.
	Conns *Conns
	// Settle is how long traffic runs before the failure and after the
	// return (default 1 s); After, how long after the route changed
	// (default 3 s: longer than the announce key's lease, about 2 s, so
	// the agents' reaction to a dead member falls in the failure phase).
	Settle, After time.Duration
}

// MeasureFailover runs probes, fails the edge, waits for the router to
// drop it from the prefix's multipath route, lets traffic settle, then
// brings the edge back and waits for the route to hold it again, with
// fresh probes.
func (l *Lab) MeasureFailover(ctx context.Context, o FailoverOptions) (Failover, error) {
	if o.Settle == 0 {
		o.Settle = time.Second
	}
	if o.After == 0 {
		o.After = 3 * time.Second
	}
	if o.Flows == 0 {
		o.Flows = 32
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Millisecond
	}
	r := Failover{Cause: o.Cause, Edge: o.Edge, BGP: FailoverTimes{HoldTime: HoldTime, Keepalive: Keepalive}}
	prefix := netip.MustParsePrefix(EIPPrefix)
	all := EdgesOf(PrefixSet)
	rest := slices.DeleteFunc(slices.Clone(all), func(e string) bool { return e == o.Edge })
	if _, err := l.WaitRoute(ctx, prefix, all, 30*time.Second); err != nil {
		return r, fmt.Errorf("before the failure: %w", err)
	}
	start := time.Now()
	d0 := l.SnapshotDrops()
	p, err := l.StartProbes(o.ProbeTargets, o.Flows, o.Interval)
	if err != nil {
		return r, err
	}
	time.Sleep(o.Settle)
	t0 := time.Now()
	r.FailedAt = t0
	restore, err := l.FailEdge(ctx, o.Edge, o.Cause)
	if err != nil {
		p.Stop()
		return r, err
	}
	wait := time.Duration(HoldTime)*time.Second + 10*time.Second
	if _, err := l.WaitRoute(ctx, prefix, rest, wait); err != nil {
		r.Withdrawn = -1
	} else {
		r.Withdrawn = time.Since(t0)
		r.WithdrawnAt = time.Now()
	}
	time.Sleep(o.After)
	r.Probes = p.Stop()
	d1 := l.SnapshotDrops()
	r.Drops = DropsBetween(d0, d1)
	r.RestoredAt = time.Now()
	if err := restore(ctx); err != nil {
		return r, fmt.Errorf("bring %s back: %w", o.Edge, err)
	}
	// The return: the edge comes back and the router spreads flows over
	// it again (ECMP rehashes: flows move between members).
	p, err = l.StartProbes(o.ProbeTargets, o.Flows, o.Interval)
	if err != nil {
		return r, err
	}
	rj, err := l.WaitRoute(ctx, prefix, all, 60*time.Second)
	r.RejoinedAt = time.Now()
	if o.Cause == CauseSIGTERM || o.Cause == CauseSIGKILL {
		if ts, _ := l.LogTimes(o.Edge, logSyncReady, r.RestoredAt); len(ts) > 0 {
			r.SyncReadyAt = ts[0]
		}
		if ts, _ := l.LogTimes(o.Edge, logAnnounces, r.RestoredAt); len(ts) > 0 {
			r.AnnouncedAt = ts[0]
		}
	}
	time.Sleep(o.Settle)
	r.ReturnProbes = p.Stop()
	r.ReturnDrops = DropsBetween(d1, l.SnapshotDrops())
	if err != nil {
		return r, fmt.Errorf("%s did not return: %w", o.Edge, err)
	}
	r.Rejoined = rj
	if o.Conns != nil {
		r.ConnsLost = o.Conns.Lost(start)
	}
	if r.Withdrawn < 0 {
		return r, fmt.Errorf("%s (%s): the router kept its route to the edge for %v", o.Edge, o.Cause, wait)
	}
	return r, nil
}

// Fleet services for failover measurements: an encap service, the same
// behind an IPv6 VIP, and a nat service, IPv4 and IPv6, with a TCP and a
// UDP echo listener each.
const (
	FleetVIP     = "198.51.100.50"   // encap: tcp/udp 7000 -> g1 of az1-h1, az2-h1, az3-h1
	FleetVIP6    = "2001:db8:e1::50" // encap, IPv6: the same backends (their address6)
	FleetNATVIP  = "198.51.100.31"   // nat: tcp/udp 7000 -> dmz1..3
	FleetNATVIP6 = "2001:db8:e1::31" // nat, IPv6: the same servers (their IPv6 addresses)
)

// PutFleetServices creates the failover measurements' services.
func (l *Lab) PutFleetServices(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	ls := []model.Listener{{Protocol: "tcp", Port: 7000, Pool: "echo"}, {Protocol: "udp", Port: 7000, Pool: "echo"}}
	var guests, dmz []model.Backend
	for az := 1; az <= l.Cfg.AZs; az++ {
		guests = append(guests, model.Backend{Host: HostName(az, 1), Guest: "g1"})
	}
	var dmz6 []model.Backend
	for i := 1; i <= DMZServers; i++ {
		dmz = append(dmz, model.Backend{Address: DMZAddr(i)})
		dmz6 = append(dmz6, model.Backend{Address: DMZAddr6(i)})
	}
	for _, s := range []*model.Service{
		{Name: "fleet", VIP: netip.MustParseAddr(FleetVIP), Mode: model.ModeEncap, Listeners: ls, Pools: []model.Pool{{Name: "echo", Backends: guests}}},
		{Name: "fleet6", VIP: netip.MustParseAddr(FleetVIP6), Mode: model.ModeEncap, Listeners: ls, Pools: []model.Pool{{Name: "echo", Backends: guests}}},
		{Name: "fleet-nat", VIP: netip.MustParseAddr(FleetNATVIP), Mode: model.ModeNAT, Listeners: ls, Pools: []model.Pool{{Name: "echo", Backends: dmz}}},
		{Name: "fleet-nat6", VIP: netip.MustParseAddr(FleetNATVIP6), Mode: model.ModeNAT, Listeners: ls, Pools: []model.Pool{{Name: "echo", Backends: dmz6}}},
	} {
		if _, err := c.PutService(ctx, s); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	return nil
}
