package edge

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// SyncConfig turns on connection sync with the other members of the
// edge's set (internal/connsync, docs/connsync.md).
type SyncConfig struct {
	// Port the edge listens on, on its underlay address (the set's
	// record of it), for its peers' sessions; every member of a set uses
	// the same port, so a peer's address is its underlay and this port.
	// 0: sync is off.
	Port uint16
	// Secrets holds the region's shared sync secret (created by the
	// first edge that asks).
	Secrets store.Secrets
	// Refresh and JoinTimeout: connsync.Config's (0: its defaults).
	Refresh, JoinTimeout time.Duration

	// underlayAddr maps a member's underlay address to the address its
	// sync socket has (tests: loopback addresses stand for underlay ones,
	// which the set refuses); nil: the same.
	underlayAddr func(netip.Addr) netip.Addr
}

func (c SyncConfig) addrOf(a netip.Addr) netip.Addr {
	if c.underlayAddr != nil {
		return c.underlayAddr(a)
	}
	return a
}

// SyncSecretName names the region's connection-sync secret in the store.
const SyncSecretName = "connsync"

// syncMembers returns this edge's underlay address and the other members
// of its set; known is false until the store has been read and applied
// once (so the backends a full copy names are in the maps) and the edge
// is in a set.
func (r *Reconciler) syncMembers() (me netip.Addr, others []model.EdgeNode, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loading || r.idx == nil || r.rev == 0 {
		return netip.Addr{}, nil, false
	}
	set, self, ok := r.idx.edgeSetOf(r.cfg.Name)
	if !ok {
		return netip.Addr{}, nil, false
	}
	for _, e := range set.Edges {
		if e.Name != r.cfg.Name {
			others = append(others, e)
		}
	}
	return self.Underlay, others, true
}

// runSync runs connection sync until ctx ends, once the edge knows its
// underlay address (the listening address); started gets the Syncer.
func runSync(ctx context.Context, cfg Config, rec *Reconciler, dp *dataplane.Edge, started func(*connsync.Syncer)) error {
	sc := cfg.Sync
	if sc.Secrets == nil {
		return fmt.Errorf("edge: connection sync: no store for the shared secret")
	}
	secret, err := sc.Secrets.Secret(ctx, SyncSecretName, 32)
	if err != nil {
		return fmt.Errorf("edge: connection sync: %w", err)
	}
	// The underlay address comes from the set: wait for the store.
	var me netip.Addr
	for {
		if a, _, ok := rec.syncMembers(); ok {
			me = a
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		return fmt.Errorf("edge: connection sync: jiffies: %w", err)
	}
	defer b.Close()
	clock, err := connsync.NewJiffyClock(b.Jiffies, cfg.LB.HZ)
	if err != nil {
		return fmt.Errorf("edge: connection sync: jiffies: %w", err)
	}
	events, err := dp.OpenConnEvents()
	if err != nil {
		return err
	}
	defer events.Close()
	defer dp.SetConnSync(false)
	maxAge := max(cfg.LB.SYN, cfg.LB.Established, cfg.LB.FIN, cfg.LB.UDP)
	s, err := connsync.New(connsync.Config{
		Name: cfg.Name, Listen: netip.AddrPortFrom(sc.addrOf(me), sc.Port), Secret: secret, Table: dp, Events: events, Clock: clock,
		Log: cfg.Log.With("part", "connsync"), MaxAge: maxAge, Refresh: sc.Refresh, JoinTimeout: sc.JoinTimeout,
		SetEvents: dp.SetConnSync,
		Peers: func() ([]connsync.Peer, bool) {
			_, others, ok := rec.syncMembers()
			ps := make([]connsync.Peer, 0, len(others))
			for _, e := range others {
				ps = append(ps, connsync.Peer{Name: e.Name, Addr: netip.AddrPortFrom(sc.addrOf(e.Underlay), sc.Port)})
			}
			return ps, ok
		},
	})
	if err != nil {
		return err
	}
	if err := s.Listen(); err != nil {
		return err
	}
	cfg.Log.Info("connection sync listening", "addr", s.Addr())
	started(s)
	return s.Run(ctx)
}

// syncStatus adds the Syncer's state to a node status.
func syncStatus(s *connsync.Syncer, ns *model.NodeStatus) {
	st := s.Status()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ns.Sync = &model.SyncStatus{Ready: st.Ready, Reason: st.Reason, LagP50MS: ms(st.Lag.P50), LagP99MS: ms(st.Lag.P99), LagMaxMS: ms(st.Lag.Max)}
	for _, p := range st.Peers {
		ns.Sync.Peers = append(ns.Sync.Peers, model.SyncPeerStatus{Name: p.Name, Addr: p.Addr, Connected: p.Connected, Queued: p.Queued, Error: p.Error})
	}
	if ns.Counters == nil {
		ns.Counters = map[string]model.Count{}
	}
	// Entries in packets; the bytes of sync_sent in its bytes.
	for k, v := range st.Metrics.Counters() {
		ns.Counters[k] = model.Count{Packets: v}
	}
	ns.Counters["sync_sent"] = model.Count{Packets: st.Metrics.Sent, Bytes: st.Metrics.SentBytes}
	delete(ns.Counters, "sync_sent_bytes")
}
