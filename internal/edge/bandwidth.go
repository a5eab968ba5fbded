package edge

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// Shared bandwidth on the edge (issue 10; docs/bandwidth.md, "Hosts:
// measurement and enforcement"): the edge measures each packaged EIP's
// Internet -> EIP traffic (the rx counters the DDoS rate reports read,
// rates.go), reports it to its zone (--bw-zone) and enforces the EIP's
// ingress limit. It carries an EIP it has a route for when its set is
// one that may see the EIP's traffic (setplan.Carriers: the set serving
// it, and during a quarantine or after a pull-out the sets it came from);
// the static split divides the EIP's share over the live members of all
// those sets, so the edges of every set that carries it enforce together
// no more than the share.

// DefaultBandwidthZone is the zone edges report to unless told otherwise.
const DefaultBandwidthZone = "edge"

// BandwidthConfig turns the edge's shared bandwidth on (Store nil: off).
type BandwidthConfig struct {
	Store    bwstore.Store
	Zone     string        // "": DefaultBandwidthZone
	Interval time.Duration // 0: bandwidth.DefaultInterval
	Grace    time.Duration // 0: bandwidth.DefaultGrace
}

// bwState is the reconciler's side of the bandwidth host.
type bwState struct {
	zone  string
	view  bwenforce.View // as of the last currentView (EIPs nil: before the first commit)
	host  *bwenforce.Host
	ann   setplan.Announcing // set -> edges announcing (nil: not read yet)
	dirty bool               // the view must be computed again
	ready bool               // a commit happened: the index holds the desired state
}

// liveMembers counts the live members of set (setplan.LiveMembers, as
// the agents count them); at least 1 (this edge carries the EIP whatever
// the others do).
func liveMembers(set *model.EdgeSet, ann setplan.Announcing) int {
	live, _ := setplan.LiveMembers(set.Name, set.Edges, ann)
	return max(len(live), 1)
}

// bandwidthView computes the edge's view from the index (under r.mu).
func (r *Reconciler) bandwidthView() (bwenforce.View, error) {
	x := r.idx
	v := bwenforce.View{Zone: r.bw.zone, EIPs: map[netip.Addr]bwenforce.Carried{}}
	set, _, ok := x.edgeSetOf(r.cfg.Name)
	if !ok || len(x.bwOf) == 0 {
		return v, nil
	}
	in := x.setplan()
	var addrs []netip.Addr
	sets := map[netip.Addr][3]string{}
	for a := range x.bwOf {
		if _, routed := x.wantAddr(a); !routed {
			continue
		}
		c := in.Carriers(a)
		if c[0] == set.Name || c[1] == set.Name || c[2] == set.Name {
			addrs = append(addrs, a)
			sets[a] = c
		}
	}
	live := map[string]int{}
	carriers := func(a netip.Addr) int {
		c, n := sets[a], 0
		for i, name := range c {
			if name == "" || slices.Contains(c[:i], name) {
				continue
			}
			if _, ok := live[name]; !ok {
				if s, ok := x.sets[name]; ok {
					live[name] = liveMembers(s, r.bw.ann)
				}
			}
			n += live[name]
		}
		return n
	}
	return bwenforce.NewView(r.bw.zone, x.packages, func(a netip.Addr) (string, bool) {
		p, ok := x.bwOf[a]
		return p, ok
	}, addrs, carriers)
}

// updateBandwidth kicks the host when a change touched the view (commit,
// SetAnnouncements; under r.mu). The host computes the view again when it
// next asks for it (currentView): a burst of commits costs one rebuild,
// not one each (a rebuild walks every packaged EIP).
func (r *Reconciler) updateBandwidth() {
	if r.bw == nil || !r.bw.dirty || r.loading {
		return
	}
	if r.bw.host != nil {
		r.bw.host.Kick()
	}
}

// bandwidthCommitted is Commit's: the index holds the desired state.
func (r *Reconciler) bandwidthCommitted() {
	if r.bw != nil {
		r.bw.ready = true
		r.updateBandwidth()
	}
}

// currentView returns the edge's view, computed again first if a change
// touched it (the host's View); before the first commit, a view with
// EIPs nil (the host changes nothing).
func (r *Reconciler) currentView() bwenforce.View {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bw.dirty && r.bw.ready && !r.loading {
		v, err := r.bandwidthView()
		if err != nil {
			r.log.Warn("bandwidth view", "err", err)
		}
		r.bw.dirty = false
		r.bw.view = v
	}
	return r.bw.view
}

// SetAnnouncements takes the edges' announcements (store.WatchAnnouncements):
// who is live in the edge's set, for the static split.
func (r *Reconciler) SetAnnouncements(all map[string]model.Announcement) {
	ann := setplan.AnnouncingFrom(all)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bw == nil {
		return
	}
	r.bw.ann, r.bw.dirty = ann, true
	r.updateBandwidth()
}

// EnableBandwidth creates the edge's bandwidth reporter and enforcer over
// limits (the edge's data plane), reading counters through meter; call
// it before the first commit, then run the returned host.
func (r *Reconciler) EnableBandwidth(cfg BandwidthConfig, meter *rateMeter, limits dataplane.BandwidthMaps, log *slog.Logger) (*bwenforce.Host, error) {
	if cfg.Zone == "" {
		cfg.Zone = DefaultBandwidthZone
	}
	interval := cfg.Interval
	if interval == 0 {
		interval = bandwidth.DefaultInterval
	}
	st := &bwState{zone: cfg.Zone, dirty: true}
	counters := func() (map[netip.Addr]bwenforce.Reading, time.Time, error) {
		return meter.counters(r.maps, time.Now(), interval/2, r.currentView().EIPs)
	}
	h, err := bwenforce.NewHost(bwenforce.HostConfig{Store: cfg.Store, Reporter: r.cfg.Name, Dir: bwstore.Ingress,
		Interval: cfg.Interval, Grace: cfg.Grace, Counters: bwenforce.CountersFunc(counters),
		Limits: dataplane.LockedBandwidth(&r.mu, limits), View: r.currentView, Log: log})
	if err != nil {
		return nil, err
	}
	st.host = h
	r.mu.Lock()
	r.bw = st
	r.mu.Unlock()
	return h, nil
}

// watchBandwidthAnnouncements follows the announce keys into r until ctx
// ends (as the agents do, agent.WatchAnnouncements): a store failure is
// retried with backoff, the live count kept meanwhile.
func watchBandwidthAnnouncements(ctx context.Context, st store.PrefixReader, r *Reconciler, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := store.WatchAnnouncements(ctx, st, func(all map[string]model.Announcement) {
			r.SetAnnouncements(all)
			backoff = 100 * time.Millisecond
		}, func(store.AnnounceEntry) {})
		if ctx.Err() != nil {
			return
		}
		log.Warn("watching the announcements failed; reading them again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
