// Package nodemetrics serves a node's status (model.NodeStatus) as
// Prometheus metrics. Edges and agents both use it, so it sits below
// them: the agent does not import the edge (issue 7, section 6).
package nodemetrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/model"
)

// Serve exposes get's status as Prometheus metrics on addr, labelled with
// role, until ctx ends.
func Serve(ctx context.Context, addr, role string, get func() model.NodeStatus, log *slog.Logger) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(statusCollector{role: role, get: get})
	srv := &http.Server{Addr: addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("metrics listener", "addr", addr, "err", err)
	}
}

type statusCollector struct {
	role string
	get  func() model.NodeStatus
}

var (
	descPackets = prometheus.NewDesc("azgate_dataplane_packets_total", "Packets by data-plane outcome.", []string{"role", "outcome"}, nil)
	descBytes   = prometheus.NewDesc("azgate_dataplane_bytes_total", "Bytes by data-plane outcome.", []string{"role", "outcome"}, nil)
	descRoutes  = prometheus.NewDesc("azgate_routes", "EIP routes (edge) or hosted EIPs (agent) programmed.", []string{"role"}, nil)
	descRev     = prometheus.NewDesc("azgate_applied_revision", "Store revision the data plane reflects.", []string{"role"}, nil)
	descEIP     = prometheus.NewDesc("azgate_eip_packets_total", "Packets per EIP and direction.", []string{"role", "eip", "direction"}, nil)
	descInvalid = prometheus.NewDesc("azgate_invalid_objects", "Objects in the store that failed validation and are not programmed.", []string{"role"}, nil)
)

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descRoutes, descRev, descEIP, descInvalid} {
		ch <- d
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.get()
	for k, v := range s.Counters {
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(v.Packets), c.role, k)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(v.Bytes), c.role, k)
	}
	ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(s.Routes), c.role)
	ch <- prometheus.MustNewConstMetric(descRev, prometheus.GaugeValue, float64(s.AppliedRevision), c.role)
	ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.GaugeValue, float64(len(s.Invalid)), c.role)
	for e, v := range s.EIPs {
		ch <- prometheus.MustNewConstMetric(descEIP, prometheus.CounterValue, float64(v.RxPackets), c.role, e, "rx")
		ch <- prometheus.MustNewConstMetric(descEIP, prometheus.CounterValue, float64(v.TxPackets), c.role, e, "tx")
	}
}
