package agent

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// Shared bandwidth on the host (issue 10; docs/bandwidth.md, "Hosts:
// measurement and enforcement"): the agent measures each packaged EIP's
// guest -> Internet traffic (the tx counters of its stats slot), reports
// it to its AZ's zone and enforces the EIP's egress limit.

// BandwidthConfig turns the host's shared bandwidth on (Store nil: off).
type BandwidthConfig struct {
	Store    bwstore.Store
	Interval time.Duration // 0: bwenforce.HostConfig's default
	Grace    time.Duration // 0: bwenforce.HostConfig's default
}

// bwState is the reconciler's side of the bandwidth host: the view it
// computes at each change of the desired state, and the host to kick.
type bwState struct {
	view bwenforce.View
	host *bwenforce.Host
}

// BandwidthView computes the host's view: the zone is the host's AZ, the
// carried EIPs those bound to its guests that belong to a package (each
// carried by this host alone).
func BandwidthView(st *model.State, host string, want HostWant) (bwenforce.View, error) {
	zone := ""
	if h, ok := st.Hosts[host]; ok {
		zone = h.AZ
	}
	addrs := make([]netip.Addr, 0, len(want.EIPs))
	for a := range want.EIPs {
		addrs = append(addrs, a)
	}
	return bwenforce.NewView(zone, st.BandwidthPackages, st.PackageOf, addrs, nil)
}

// updateBandwidth recomputes the view (Handle, under r.mu) and kicks the
// host when it changed, so a newly bound EIP gets its limit at once.
func (r *Reconciler) updateBandwidth(st *model.State, want HostWant) {
	if r.bw == nil {
		return
	}
	v, err := BandwidthView(st, r.cfg.Name, want)
	if err != nil {
		r.fail(err)
	}
	if r.bw.view.EIPs != nil && v.Zone == r.bw.view.Zone && sameCarried(v.EIPs, r.bw.view.EIPs) {
		return
	}
	r.bw.view = v
	if r.bw.host != nil {
		r.bw.host.Kick()
	}
}

func sameCarried(a, b map[netip.Addr]bwenforce.Carried) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (r *Reconciler) bandwidthView() bwenforce.View {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bw == nil {
		return bwenforce.View{}
	}
	return r.bw.view
}

// bandwidthCounters reads the tx counters (guest -> Internet) of every
// programmed EIP's stats slot.
func (r *Reconciler) bandwidthCounters() (map[netip.Addr]bwenforce.Reading, time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[netip.Addr]bwenforce.Reading, len(r.programmed))
	now := time.Now()
	for a, e := range r.programmed {
		c, err := r.maps.EIPStats(e.StatsIdx)
		if err != nil {
			return nil, now, err
		}
		out[a] = bwenforce.Reading{Bytes: c.TxBytes, Packets: c.TxPackets, Slot: e.StatsIdx}
	}
	return out, now, nil
}

// EnableBandwidth creates the host's bandwidth reporter and enforcer over
// maps (the agent's data plane); call it before the first Handle, then
// run the returned host.
func (r *Reconciler) EnableBandwidth(cfg BandwidthConfig, maps dataplane.BandwidthMaps, log *slog.Logger) (*bwenforce.Host, error) {
	h, err := bwenforce.NewHost(bwenforce.HostConfig{Store: cfg.Store, Reporter: r.cfg.Name, Dir: bwstore.Egress,
		Interval: cfg.Interval, Grace: cfg.Grace, Counters: bwenforce.CountersFunc(r.bandwidthCounters),
		Limits: dataplane.LockedBandwidth(&r.mu, maps), View: r.bandwidthView, Log: log})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.bw = &bwState{host: h}
	r.mu.Unlock()
	return h, nil
}
