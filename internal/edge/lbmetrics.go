package edge

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/dataplane"
)

// BackendCount is a programmed backend's data-plane counters (since its
// slot was zeroed for it).
type BackendCount struct {
	Service, Pool, Backend string
	dataplane.LBCounters
}

// BackendCounters reads the counters of every programmed backend: the
// slots under the reconciler's lock, the counters outside it (one lookup
// per backend: bounded by --backend-max).
func (r *Reconciler) BackendCounters() []BackendCount {
	type slot struct {
		id  string
		idx uint32
	}
	r.mu.Lock()
	var slots []slot
	var maps dataplane.LBMaps
	if r.lb != nil {
		maps = r.lb.maps
		for id, b := range r.lb.backends {
			if b.reset { // counters zeroed for this backend
				slots = append(slots, slot{id, b.idx})
			}
		}
	}
	r.mu.Unlock()
	out := make([]BackendCount, 0, len(slots))
	for _, s := range slots {
		c, err := maps.BackendCounters(s.idx)
		if err != nil {
			continue
		}
		parts := strings.SplitN(s.id, "/", 3) // service/pool/key (a key may hold "/")
		if len(parts) != 3 {
			continue
		}
		out = append(out, BackendCount{Service: parts[0], Pool: parts[1], Backend: parts[2], LBCounters: c})
	}
	// By service, pool and backend, compared in place: a scrape sorts up
	// to --backend-max of them, and a joined key per comparison would be
	// millions of allocations.
	slices.SortFunc(out, func(a, b BackendCount) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Pool, b.Pool), strings.Compare(a.Backend, b.Backend))
	})
	return out
}

var (
	descBEPackets = prometheus.NewDesc("azgate_lb_backend_packets_total", "Packets the edge sent to a load-balanced backend (per VIP: sum by service).", []string{"service", "pool", "backend"}, nil)
	descBEBytes   = prometheus.NewDesc("azgate_lb_backend_bytes_total", "Bytes the edge sent to a load-balanced backend.", []string{"service", "pool", "backend"}, nil)
	descBEConns   = prometheus.NewDesc("azgate_lb_backend_connections_total", "New connections the edge gave a load-balanced backend.", []string{"service", "pool", "backend"}, nil)
)

// BackendCollector exports get's backend counters (a Reconciler's
// BackendCounters on a running edge).
func BackendCollector(get func() []BackendCount) prometheus.Collector { return lbCollector{get} }

// lbCollector exports BackendCounters.
type lbCollector struct{ get func() []BackendCount }

func (lbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBEPackets
	ch <- descBEBytes
	ch <- descBEConns
}

func (c lbCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.get() {
		ch <- prometheus.MustNewConstMetric(descBEPackets, prometheus.CounterValue, float64(b.Packets), b.Service, b.Pool, b.Backend)
		ch <- prometheus.MustNewConstMetric(descBEBytes, prometheus.CounterValue, float64(b.Bytes), b.Service, b.Pool, b.Backend)
		ch <- prometheus.MustNewConstMetric(descBEConns, prometheus.CounterValue, float64(b.Conns), b.Service, b.Pool, b.Backend)
	}
}
