// Package edge is the edge role: it follows the desired state in the store
// and keeps the edge data plane's maps equal to it. The XDP program does
// the forwarding; this daemon only programs it, so it may stop and start
// again without a packet being lost (maps and links are pinned).
package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// DefaultHashSeed is the cluster-wide flow hash seed every edge and agent
// uses unless told otherwise (all nodes must agree).
const DefaultHashSeed = 0x61a9a7e5

// GatewayMAC is the inner Ethernet source of encapsulated frames: the
// virtual router of every tenant subnet.
var GatewayMAC = net.HardwareAddr{0x02, 0xa2, 0x9a, 0x7e, 0x00, 0x01}

// Want is what the edge must hold for one EIP.
type Want struct {
	Host netip.Addr
	VSID uint32
}

// Desired computes every route the edge must hold: one per bound EIP whose
// host and guest exist. Every edge holds every binding (sets only decide
// which prefixes an edge announces), so any edge can decapsulate any reply.
func Desired(st *model.State) map[netip.Addr]Want {
	out := make(map[netip.Addr]Want, len(st.EIPs))
	for _, e := range st.EIPs {
		if w, ok := want(st, e); ok {
			out[e.Address] = w
		}
	}
	return out
}

func want(st *model.State, e *model.EIP) (Want, bool) {
	if e == nil || e.Binding == nil {
		return Want{}, false
	}
	h, ok := st.Hosts[e.Binding.Host]
	if !ok {
		return Want{}, false
	}
	g, ok := h.Guest(e.Binding.Guest)
	if !ok {
		return Want{}, false
	}
	return Want{Host: h.Underlay, VSID: g.VSID}, true
}

// Config of an edge daemon.
type Config struct {
	Name             string
	Interfaces       []string // XDP is attached to each
	ICMPSource       netip.Addr
	HashSeed         uint32
	ICMPRate         uint32
	ICMPBurst        uint32
	ICMPTimeExceeded bool
	StatusInterval   time.Duration
	// IfindexOf finds the interface holding an address (the underlay
	// interface holds the edge's underlay address); nil: not checked.
	IfindexOf func(netip.Addr) (uint32, error)
	Version   string
	Log       *slog.Logger
}

// Reconciler keeps an EdgeMaps equal to the desired state. It is the part
// of the edge that is tested without a kernel (with dataplane fakes).
type Reconciler struct {
	cfg  Config
	maps dataplane.EdgeMaps
	log  *slog.Logger

	mu         sync.Mutex
	programmed map[netip.Addr]dataplane.Route // mirror of the route map
	free       []uint32                       // counter slots to reuse
	next       uint32                         // next never-used slot
	rev        int64
	underlay   netip.Addr
	prefixes   []netip.Prefix // the edge set's prefixes
	errs       []string
	dirty      bool            // a write failed: the next change resyncs in full
	OnApplied  func(rev int64) // called after each successful apply
}

// NewReconciler reads what the maps already hold (after a restart they
// hold the previous state), so counter slots and routes carry over.
func NewReconciler(cfg Config, maps dataplane.EdgeMaps) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, maps: maps, log: cfg.Log}
	cur, err := maps.Routes()
	if err != nil {
		return nil, err
	}
	r.programmed = cur
	used := make(map[uint32]bool, len(cur))
	for _, rt := range cur {
		used[rt.StatsIdx] = true
		if rt.StatsIdx >= r.next {
			r.next = rt.StatsIdx + 1
		}
	}
	for i := uint32(0); i < r.next; i++ {
		if !used[i] {
			r.free = append(r.free, i)
		}
	}
	return r, nil
}

func (r *Reconciler) alloc() (uint32, error) {
	if n := len(r.free); n > 0 {
		idx := r.free[n-1]
		r.free = r.free[:n-1]
		return idx, r.maps.ResetEIPStats(idx)
	}
	idx := r.next
	r.next++
	return idx, r.maps.ResetEIPStats(idx)
}

// Handle is a store.Handler: it applies a change (or a full resync).
func (r *Reconciler) Handle(st *model.State, rev int64, events []store.Event, resync bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = nil
	if err := r.applyConfig(st); err != nil {
		r.fail(err)
		return
	}
	full := resync || r.dirty
	var changed []netip.Addr
	for _, e := range events {
		if e.Kind != model.KindEIP {
			full = true // a host or set change can touch many routes
			break
		}
		a, err := netip.ParseAddr(e.Key)
		if err != nil {
			continue
		}
		changed = append(changed, a)
	}
	var err error
	if full {
		err = r.sync(Desired(st))
	} else {
		err = r.update(st, changed)
	}
	if err != nil {
		r.fail(err)
		return
	}
	r.rev = rev
	r.dirty = false
	if r.OnApplied != nil {
		r.OnApplied(rev)
	}
}

func (r *Reconciler) fail(err error) {
	r.dirty = true
	r.errs = append(r.errs, err.Error())
	r.log.Error("reconcile failed; the data plane keeps its previous state", "err", err)
}

func (r *Reconciler) applyConfig(st *model.State) error {
	set, me, ok := st.EdgeSetOf(r.cfg.Name)
	if !ok {
		return fmt.Errorf("edge %q is not a member of any edge set: add it to one (azgate set create ... --edge name=%s,underlay=ADDR)", r.cfg.Name, r.cfg.Name)
	}
	r.prefixes = append(r.prefixes[:0], set.Prefixes...)
	if me.Underlay == r.underlay {
		return nil
	}
	var ul uint32
	if r.cfg.IfindexOf != nil {
		var err error
		if ul, err = r.cfg.IfindexOf(me.Underlay); err != nil {
			return fmt.Errorf("underlay address %v of edge %s: %w", me.Underlay, r.cfg.Name, err)
		}
	}
	err := r.maps.SetConfig(dataplane.EdgeConfig{
		Underlay: me.Underlay, ICMPSource: r.cfg.ICMPSource, HashSeed: r.cfg.HashSeed,
		ICMPRate: r.cfg.ICMPRate, ICMPBurst: r.cfg.ICMPBurst, ICMPTimeExceeded: r.cfg.ICMPTimeExceeded,
		GatewayMAC: GatewayMAC, UnderlayIfindex: ul,
	})
	if err != nil {
		return err
	}
	r.log.Info("edge configured", "underlay", me.Underlay, "underlay_ifindex", ul, "icmp_source", r.cfg.ICMPSource)
	r.underlay = me.Underlay
	return nil
}

// sync makes the maps equal to want.
func (r *Reconciler) sync(want map[netip.Addr]Want) error {
	put := map[netip.Addr]dataplane.Route{}
	var del []netip.Addr
	for a, w := range want {
		cur, ok := r.programmed[a]
		if ok && cur.Host == w.Host && cur.VSID == w.VSID {
			continue
		}
		idx := cur.StatsIdx
		if !ok {
			var err error
			if idx, err = r.alloc(); err != nil {
				return err
			}
		}
		put[a] = dataplane.Route{Host: w.Host, VSID: w.VSID, StatsIdx: idx}
	}
	for a := range r.programmed {
		if _, ok := want[a]; !ok {
			del = append(del, a)
		}
	}
	return r.write(put, del)
}

// update applies the changes of a few EIPs.
func (r *Reconciler) update(st *model.State, addrs []netip.Addr) error {
	want := make(map[netip.Addr]Want, len(addrs))
	for _, a := range addrs {
		if w, ok := want1(st, a); ok {
			want[a] = w
		}
	}
	put := map[netip.Addr]dataplane.Route{}
	var del []netip.Addr
	for _, a := range addrs {
		w, ok := want[a]
		cur, had := r.programmed[a]
		switch {
		case !ok && had:
			del = append(del, a)
		case ok && had && cur.Host == w.Host && cur.VSID == w.VSID:
		case ok:
			idx := cur.StatsIdx
			if !had {
				var err error
				if idx, err = r.alloc(); err != nil {
					return err
				}
			}
			put[a] = dataplane.Route{Host: w.Host, VSID: w.VSID, StatsIdx: idx}
		}
	}
	return r.write(put, del)
}

func want1(st *model.State, a netip.Addr) (Want, bool) {
	return want(st, st.EIPs[a.String()])
}

func (r *Reconciler) write(put map[netip.Addr]dataplane.Route, del []netip.Addr) error {
	if len(put) > 0 {
		if err := r.maps.PutRoutes(put); err != nil {
			return err
		}
		for a, rt := range put {
			r.programmed[a] = rt
		}
	}
	if len(del) > 0 {
		if err := r.maps.DeleteRoutes(del); err != nil {
			return err
		}
		for _, a := range del {
			r.free = append(r.free, r.programmed[a].StatsIdx)
			delete(r.programmed, a)
		}
	}
	if len(put)+len(del) > 0 {
		r.log.Debug("routes programmed", "put", len(put), "deleted", len(del), "total", len(r.programmed))
	}
	return nil
}

// Programmed returns a copy of the routes the maps hold.
func (r *Reconciler) Programmed() map[netip.Addr]dataplane.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[netip.Addr]dataplane.Route, len(r.programmed))
	for a, rt := range r.programmed {
		out[a] = rt
	}
	return out
}

// Prefixes returns the prefixes of the edge's set.
func (r *Reconciler) Prefixes() []netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]netip.Prefix(nil), r.prefixes...)
}

// Hosts returns the distinct underlay addresses routes point at.
func (r *Reconciler) Hosts() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[netip.Addr]bool{}
	for _, rt := range r.programmed {
		seen[rt.Host] = true
	}
	out := make([]netip.Addr, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// maxStatusEIPs bounds the per-EIP counters published in the status key.
const maxStatusEIPs = 4096

// Status builds the node status.
func (r *Reconciler) Status(started time.Time, ifaces []string) model.NodeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := model.NodeStatus{Role: "edge", Name: r.cfg.Name, Version: r.cfg.Version, Started: started, Updated: time.Now().UTC(),
		AppliedRevision: r.rev, Interfaces: ifaces, Routes: len(r.programmed), Errors: r.errs}
	if c, err := r.maps.Stats(); err == nil {
		s.Counters = map[string]model.Count{}
		for k, v := range c {
			s.Counters[k] = model.Count(v)
		}
	}
	if len(r.programmed) <= maxStatusEIPs {
		s.EIPs = map[string]model.EIPCounters{}
		for a, rt := range r.programmed {
			if c, err := r.maps.EIPStats(rt.StatsIdx); err == nil {
				s.EIPs[a.String()] = model.EIPCounters(c)
			}
		}
	}
	return s
}

// PublishStatus writes the status under /azgate/status/ROLE/NAME with a
// lease, every interval, until ctx ends.
func PublishStatus(ctx context.Context, s *store.Store, role, name string, every time.Duration, get func() model.NodeStatus, log *slog.Logger) {
	key := store.StatusRoot + role + "/" + name
	ttl := int64(max(3*every/time.Second, 5))
	var lease clientv3.LeaseID
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		b, _ := json.Marshal(get())
		if lease == 0 {
			if l, err := s.Client.Grant(ctx, ttl); err == nil {
				lease = l.ID
			}
		}
		if lease != 0 {
			if _, err := s.Client.Put(ctx, key, string(b), clientv3.WithLease(lease)); err != nil {
				if ctx.Err() == nil {
					log.Warn("status publish failed", "err", err)
				}
				lease = 0
			} else if _, err := s.Client.KeepAliveOnce(ctx, lease); err != nil {
				lease = 0
			}
		}
		select {
		case <-ctx.Done():
			if lease != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s.Client.Revoke(rctx, lease)
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

// ErrStop is returned when the daemon is asked to stop.
var ErrStop = errors.New("stopped")
