package edge

import (
	"cmp"
	"context"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/dataplane"
)

// The connection table's occupancy (docs/observability.md): walked every
// OccupancyInterval in batches (dataplane.ConnOccupancy: about 0.3 s for
// a million entries), outside the reconciler's lock, and published as
// gauges, at most OccupancyTopVIPs VIPs and OccupancyTopBackends backends
// (those with the most entries).
const (
	OccupancyInterval    = 15 * time.Second
	OccupancyTopVIPs     = 1024
	OccupancyTopBackends = 4096
)

// Occupancy is one walk's figures, named.
type Occupancy struct {
	Total, Capacity uint32
	Walk            time.Duration // how long the walk took
	VIPs            map[netip.Addr]uint32
	Backends        []BackendEntries
	// VIPsLeftOut and BackendsLeftOut count those past the top.
	VIPsLeftOut, BackendsLeftOut int
}

// BackendEntries are a backend's entries in the connection table.
type BackendEntries struct {
	Service, Pool, Backend string
	Entries                uint32
}

// backendSlots names the programmed backends' slots (under the lock;
// the walk is outside it).
func (r *Reconciler) backendSlots() map[uint32]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint32]string{}
	if r.lb != nil {
		for id, b := range r.lb.backends {
			out[b.idx] = id
		}
	}
	return out
}

// occupancyFrom names a walk's counts and keeps the top ones. An entry
// whose backend slot no backend holds now (removed since; or the walk
// raced a change) is counted in Total only.
func occupancyFrom(o dataplane.ConnOccupancy, slots map[uint32]string, topVIPs, topBackends int) Occupancy {
	out := Occupancy{Total: o.Total, Capacity: o.Capacity, VIPs: map[netip.Addr]uint32{}}
	type vip struct {
		a netip.Addr
		n uint32
	}
	vips := make([]vip, 0, len(o.ByVIP))
	for a, n := range o.ByVIP {
		vips = append(vips, vip{a, n})
	}
	top := topN(vips, topVIPs, func(x, y vip) bool { return x.n < y.n || x.n == y.n && y.a.Less(x.a) })
	for _, v := range top {
		out.VIPs[v.a] = v.n
	}
	out.VIPsLeftOut = len(vips) - len(top)
	var bes []BackendEntries
	for slot, n := range o.ByBackend {
		id, ok := slots[slot]
		if !ok {
			continue
		}
		parts := strings.SplitN(id, "/", 3) // service/pool/key
		if len(parts) != 3 {
			continue
		}
		bes = append(bes, BackendEntries{parts[0], parts[1], parts[2], n})
	}
	out.Backends = topN(bes, topBackends, func(x, y BackendEntries) bool {
		if x.Entries != y.Entries {
			return x.Entries < y.Entries
		}
		return cmp.Or(strings.Compare(x.Service, y.Service), strings.Compare(x.Pool, y.Pool), strings.Compare(x.Backend, y.Backend)) > 0
	})
	out.BackendsLeftOut = len(bes) - len(out.Backends)
	return out
}

// occupancyWalker walks the table periodically and holds the last walk.
type occupancyWalker struct {
	walk  func() (dataplane.ConnOccupancy, error)
	slots func() map[uint32]string
	mu    sync.Mutex
	last  *Occupancy
	errs  uint64
}

// run walks at once and then every interval until ctx ends.
func (w *occupancyWalker) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		start := time.Now()
		o, err := w.walk()
		took := time.Since(start)
		w.mu.Lock()
		if err != nil {
			w.errs++
		} else {
			occ := occupancyFrom(o, w.slots(), OccupancyTopVIPs, OccupancyTopBackends)
			occ.Walk = took
			w.last = &occ
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *occupancyWalker) get() (*Occupancy, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.errs
}

var (
	descOccEntries  = prometheus.NewDesc("azgate_lb_conn_table_entries", "Entries in the edge's connection table at its last walk (every 15 s).", nil, nil)
	descOccCapacity = prometheus.NewDesc("azgate_lb_conn_table_capacity", "Entries the edge's connection table holds at most (--conn-max).", nil, nil)
	descOccVIP      = prometheus.NewDesc("azgate_lb_conn_table_vip_entries", "Connection-table entries per VIP at the last walk (the 1,024 VIPs with the most).", []string{"vip"}, nil)
	descOccBackend  = prometheus.NewDesc("azgate_lb_conn_table_backend_entries", "Connection-table entries per backend at the last walk (the 4,096 backends with the most).", []string{"service", "pool", "backend"}, nil)
	descOccWalk     = prometheus.NewDesc("azgate_lb_conn_table_walk_seconds", "How long the last walk of the connection table took.", nil, nil)
	descOccErrors   = prometheus.NewDesc("azgate_lb_conn_table_walk_errors_total", "Walks of the connection table that failed.", nil, nil)
)

// OccupancyCollector exports get's last walk (nil before the first) and
// the failed walks.
func OccupancyCollector(get func() (*Occupancy, uint64)) prometheus.Collector {
	return occCollector{get}
}

type occCollector struct {
	get func() (*Occupancy, uint64)
}

func (occCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOccEntries, descOccCapacity, descOccVIP, descOccBackend, descOccWalk, descOccErrors} {
		ch <- d
	}
}

func (c occCollector) Collect(ch chan<- prometheus.Metric) {
	o, errs := c.get()
	ch <- prometheus.MustNewConstMetric(descOccErrors, prometheus.CounterValue, float64(errs))
	if o == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descOccEntries, prometheus.GaugeValue, float64(o.Total))
	ch <- prometheus.MustNewConstMetric(descOccCapacity, prometheus.GaugeValue, float64(o.Capacity))
	ch <- prometheus.MustNewConstMetric(descOccWalk, prometheus.GaugeValue, o.Walk.Seconds())
	for a, n := range o.VIPs {
		ch <- prometheus.MustNewConstMetric(descOccVIP, prometheus.GaugeValue, float64(n), a.String())
	}
	for _, b := range o.Backends {
		ch <- prometheus.MustNewConstMetric(descOccBackend, prometheus.GaugeValue, float64(b.Entries), b.Service, b.Pool, b.Backend)
	}
}
