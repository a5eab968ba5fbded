// Package nodemetrics serves a node's status (model.NodeStatus) as
// Prometheus metrics. Edges and agents both use it, so it sits below
// them: the agent does not import the edge (issue 7, section 6).
package nodemetrics

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/model"
)

// Serve exposes get's status as Prometheus metrics on addr, labelled with
// role and node (the node's name), until ctx ends. A non-empty token must
// come as "Authorization: Bearer TOKEN" (401 otherwise); empty, the
// listener is open and belongs on loopback or a management network.
func Serve(ctx context.Context, addr, role, node, token string, get func() model.NodeStatus, log *slog.Logger) {
	ServeRegistry(ctx, addr, Registry(role, node, get), token, log)
}

// Registry returns a registry exporting get's status and the extra
// collectors' series, every series labelled role and node (node absent
// when empty).
func Registry(role, node string, get func() model.NodeStatus, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	var r prometheus.Registerer = reg
	if node != "" {
		r = prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, reg)
	}
	r.MustRegister(statusCollector{role: role, get: get})
	if len(extra) > 0 {
		x := prometheus.WrapRegistererWith(prometheus.Labels{"role": role}, r)
		x.MustRegister(extra...)
	}
	return reg
}

// ServeRegistry serves reg's metrics on addr (Handler, with the server's
// timeouts and header bound) until ctx ends.
func ServeRegistry(ctx context.Context, addr string, reg prometheus.Gatherer, token string, log *slog.Logger) {
	srv := &http.Server{Addr: addr, Handler: Handler(reg, token), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("metrics listener", "addr", addr, "err", err)
	}
}

// Handler serves reg's metrics, requiring the bearer token when token is
// not empty (compared in constant time).
func Handler(reg prometheus.Gatherer, token string) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="azgate-metrics"`)
			http.Error(w, "metrics need \"Authorization: Bearer TOKEN\" with the token of --metrics-token-file", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

type statusCollector struct {
	role string
	get  func() model.NodeStatus
}

var (
	descPackets   = prometheus.NewDesc("azgate_dataplane_packets_total", "Packets by data-plane outcome (connection sync's events: azgate_sync_events_total).", []string{"role", "outcome"}, nil)
	descBytes     = prometheus.NewDesc("azgate_dataplane_bytes_total", "Bytes by data-plane outcome.", []string{"role", "outcome"}, nil)
	descRoutes    = prometheus.NewDesc("azgate_routes", "EIP routes (edge) or hosted EIPs (agent) programmed.", []string{"role"}, nil)
	descDraining  = prometheus.NewDesc("azgate_eips_draining", "EIPs moved to another host whose previous binding is still in force here (edge: routes naming the previous host; agent: EIPs still translated for their previous guest).", []string{"role"}, nil)
	descRev       = prometheus.NewDesc("azgate_applied_revision", "Store revision the data plane reflects.", []string{"role"}, nil)
	descEIP       = prometheus.NewDesc("azgate_eip_packets_total", "Packets per EIP and direction (an edge with more than 4,096 routes exports the 4,096 EIPs with the most bytes).", []string{"role", "eip", "direction"}, nil)
	descLimit     = prometheus.NewDesc("azgate_limit_dropped_packets_total", "Packets an EIP's or VIP's rate limits dropped, by reason (source: over a source's rate; syn: the SYN guard).", []string{"role", "address", "reason"}, nil)
	descInvalid   = prometheus.NewDesc("azgate_invalid_objects", "Objects in the store that failed validation and are not programmed.", []string{"role"}, nil)
	descFWPackets = prometheus.NewDesc("azgate_firewall_rule_packets_total", "Packets each firewall rule dropped (deny) or let through (allow) on this edge.", []string{"role", "rule"}, nil)
	descFWBytes   = prometheus.NewDesc("azgate_firewall_rule_bytes_total", "Bytes each firewall rule dropped (deny) or let through (allow) on this edge.", []string{"role", "rule"}, nil)
	// BGP (edges): whether the edge announces, why not, its sessions.
	descAnnouncing = prometheus.NewDesc("azgate_bgp_announcing", "1 while the edge announces its set's routes.", []string{"role"}, nil)
	descFailing    = prometheus.NewDesc("azgate_bgp_condition_failing", "1 for each condition that keeps the edge from announcing.", []string{"role", "condition"}, nil)
	descSession    = prometheus.NewDesc("azgate_bgp_session_established", "1 while the BGP session to the peer is established.", []string{"role", "peer"}, nil)
	descSessState  = prometheus.NewDesc("azgate_bgp_session_state", "1 for the BGP session's current state per peer (idle, connect, active, opensent, openconfirm, established, unknown), 0 for the others.", []string{"role", "peer", "state"}, nil)
	descAdvertised = prometheus.NewDesc("azgate_bgp_advertised_prefixes", "Prefixes the edge's speaker advertises.", []string{"role"}, nil)

	// Service tables (edges with load-balanced services): one series per
	// service pool the edge holds a table for (bounded by the services).
	descTableChecksum = prometheus.NewDesc("azgate_lb_table_checksum", "The low 48 bits of the Maglev table's checksum the edge holds for a service pool (table: SERVICE/POOL); the edges holding a table agree when they show the same value.", []string{"role", "table"}, nil)
	descTableBackends = prometheus.NewDesc("azgate_lb_table_backends", "Backends in the edge's table for a service pool (table: SERVICE/POOL), by state: healthy (in the table) or failed (down or drained).", []string{"role", "table", "state"}, nil)
	descTableSize     = prometheus.NewDesc("azgate_lb_table_slots", "Slots of the edge's Maglev table for a service pool (table: SERVICE/POOL).", []string{"role", "table"}, nil)

	// Connection sync (edges running it). Its counters (the status's
	// sync_* counters) count events (entries, sessions, failures), not
	// packets: azgate_sync_events_total, by event.
	descSyncEvents    = prometheus.NewDesc("azgate_sync_events_total", "Connection sync events by kind (the status's sync_* counters without the prefix: sent, received and applied entries, sessions, auth failures, drops...), counted as events.", []string{"role", "event"}, nil)
	descSyncSentBytes = prometheus.NewDesc("azgate_sync_sent_bytes_total", "Bytes of connection sync batches sent to the set's other members.", []string{"role"}, nil)
	descSyncReady     = prometheus.NewDesc("azgate_sync_ready", "1 when the edge's connection sync holds the table its set needs (full copy pulled, or first member).", []string{"role"}, nil)
	descSyncLag       = prometheus.NewDesc("azgate_sync_lag_seconds", "Connection sync lag, event to the peer's acknowledgement, over the recent samples, by statistic (p50, p99, max; not a summary: no count or sum).", []string{"role", "stat"}, nil)
	descSyncPeer      = prometheus.NewDesc("azgate_sync_peer_connected", "1 while the edge's sync session to a member of its set is up.", []string{"role", "peer"}, nil)

	// The data-plane monitor (docs/observability.md).
	descMonEvents = prometheus.NewDesc("azgate_monitor_events_total", "Data-plane monitor events written to the ring buffer (azgate monitor, azgate capture), over the CPUs.", []string{"role"}, nil)
	descMonLost   = prometheus.NewDesc("azgate_monitor_lost_events_total", "Data-plane monitor events not written, over the CPUs, by reason: rate_limit (over --monitor-rate per CPU), ring_full (no room left in the ring buffer).", []string{"role", "reason"}, nil)
	descMonMode   = prometheus.NewDesc("azgate_monitor_mode", "1 for the data-plane monitor's current mode (off, drops, trace), 0 for the others.", []string{"role", "mode"}, nil)

	// Shared bandwidth (nodes with --bw-store; docs/bandwidth.md).
	descBWLimit    = prometheus.NewDesc("azgate_bandwidth_limit_bytes_per_second", "The bandwidth limit a packaged EIP has on this node (agents: egress, edges: ingress), in bytes a second (the package's bits a second / 8).", []string{"role", "eip"}, nil)
	descBWDropB    = prometheus.NewDesc("azgate_bandwidth_dropped_bytes_total", "Bytes a packaged EIP's bandwidth limit dropped on this node, since the EIP took its stats slot.", []string{"role", "eip"}, nil)
	descBWDropP    = prometheus.NewDesc("azgate_bandwidth_dropped_packets_total", "Packets a packaged EIP's bandwidth limit dropped on this node, since the EIP took its stats slot.", []string{"role", "eip"}, nil)
	descBWEIPMode  = prometheus.NewDesc("azgate_bandwidth_eip_mode", "1 for where a packaged EIP's limit comes from: managed (pushed by the zone manager) or static (the package's static split).", []string{"role", "eip", "mode"}, nil)
	descBWManaged  = prometheus.NewDesc("azgate_bandwidth_managed", "1 while limits from a manager are in force on this node, 0 on the static split.", []string{"role"}, nil)
	descBWLimitAge = prometheus.NewDesc("azgate_bandwidth_limits_age_seconds", "Age of the managed limits the node holds, since the manager wrote them (absent: none).", []string{"role"}, nil)
	descBWRate     = prometheus.NewDesc("azgate_bandwidth_rate_bytes_per_second", "A packaged EIP's last measured rate on this node, in bytes a second (absent: not measured); at its azgate_bandwidth_limit_bytes_per_second it is at its cap.", []string{"role", "eip"}, nil)
	descBWEvents   = prometheus.NewDesc("azgate_bandwidth_events_total", "Shared-bandwidth events on this node: reports written, store and data-plane errors, limits ignored or clamped, falls back to the static split.", []string{"role", "event"}, nil)
)

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descRoutes, descDraining, descRev, descEIP, descLimit, descInvalid, descFWPackets, descFWBytes,
		descAnnouncing, descFailing, descSession, descSessState, descAdvertised, descSyncReady, descSyncLag, descSyncPeer, descSyncEvents, descSyncSentBytes,
		descBWLimit, descBWDropB, descBWDropP, descBWEIPMode, descBWManaged, descBWLimitAge, descBWEvents, descBWRate,
		descTableChecksum, descTableBackends, descTableSize, descMonEvents, descMonLost, descMonMode} {
		ch <- d
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.get()
	for k, v := range s.Counters {
		if ev, ok := strings.CutPrefix(k, "sync_"); ok { // events (entries, sessions...), not packets
			ch <- prometheus.MustNewConstMetric(descSyncEvents, prometheus.CounterValue, float64(v.Packets), c.role, ev)
			if k == "sync_sent" {
				ch <- prometheus.MustNewConstMetric(descSyncSentBytes, prometheus.CounterValue, float64(v.Bytes), c.role)
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(v.Packets), c.role, k)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(v.Bytes), c.role, k)
	}
	ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(s.Routes), c.role)
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, float64(s.Draining), c.role)
	ch <- prometheus.MustNewConstMetric(descRev, prometheus.GaugeValue, float64(s.AppliedRevision), c.role)
	ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.GaugeValue, float64(len(s.Invalid)), c.role)
	if y := s.Sync; y != nil {
		ready := 0.0
		if y.Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(descSyncReady, prometheus.GaugeValue, ready, c.role)
		ch <- prometheus.MustNewConstMetric(descSyncLag, prometheus.GaugeValue, y.LagP50MS/1000, c.role, "p50")
		ch <- prometheus.MustNewConstMetric(descSyncLag, prometheus.GaugeValue, y.LagP99MS/1000, c.role, "p99")
		ch <- prometheus.MustNewConstMetric(descSyncLag, prometheus.GaugeValue, y.LagMaxMS/1000, c.role, "max")
		for _, p := range y.Peers {
			up := 0.0
			if p.Connected {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descSyncPeer, prometheus.GaugeValue, up, c.role, p.Name)
		}
	}
	for tk, ts := range s.Tables {
		if sum, err := strconv.ParseUint(ts.Checksum, 16, 64); err == nil {
			ch <- prometheus.MustNewConstMetric(descTableChecksum, prometheus.GaugeValue, float64(sum&(1<<48-1)), c.role, tk)
		}
		ch <- prometheus.MustNewConstMetric(descTableBackends, prometheus.GaugeValue, float64(ts.Healthy), c.role, tk, "healthy")
		ch <- prometheus.MustNewConstMetric(descTableBackends, prometheus.GaugeValue, float64(ts.Backends-ts.Healthy), c.role, tk, "failed")
		ch <- prometheus.MustNewConstMetric(descTableSize, prometheus.GaugeValue, float64(ts.M), c.role, tk)
	}
	for rule, v := range s.Firewall {
		ch <- prometheus.MustNewConstMetric(descFWPackets, prometheus.CounterValue, float64(v.Packets), c.role, rule)
		ch <- prometheus.MustNewConstMetric(descFWBytes, prometheus.CounterValue, float64(v.Bytes), c.role, rule)
	}
	for e, v := range s.EIPs {
		ch <- prometheus.MustNewConstMetric(descEIP, prometheus.CounterValue, float64(v.RxPackets), c.role, e, "rx")
		ch <- prometheus.MustNewConstMetric(descEIP, prometheus.CounterValue, float64(v.TxPackets), c.role, e, "tx")
	}
	for a, v := range s.LimitDrops {
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.CounterValue, float64(v.Source), c.role, a, "source")
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.CounterValue, float64(v.SYN), c.role, a, "syn")
	}
	if b := s.Bandwidth; b != nil {
		c.bandwidth(ch, b)
	}
	if m := s.Monitor; m != nil {
		ch <- prometheus.MustNewConstMetric(descMonEvents, prometheus.CounterValue, float64(m.Sent), c.role)
		ch <- prometheus.MustNewConstMetric(descMonLost, prometheus.CounterValue, float64(m.LostRate), c.role, "rate_limit")
		ch <- prometheus.MustNewConstMetric(descMonLost, prometheus.CounterValue, float64(m.LostFull), c.role, "ring_full")
		for _, mode := range monitorModes {
			ch <- prometheus.MustNewConstMetric(descMonMode, prometheus.GaugeValue, b01(m.Mode == mode), c.role, mode)
		}
	}
	if b := s.BGP; b != nil {
		ch <- prometheus.MustNewConstMetric(descAnnouncing, prometheus.GaugeValue, b01(b.Announcing), c.role)
		ch <- prometheus.MustNewConstMetric(descAdvertised, prometheus.GaugeValue, float64(len(b.Advertised)), c.role)
		for _, f := range b.Failing {
			name, _, _ := strings.Cut(f, ":") // "name: why"
			ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, 1, c.role, name)
		}
		for _, ss := range b.Sessions {
			ch <- prometheus.MustNewConstMetric(descSession, prometheus.GaugeValue, b01(ss.State == "established"), c.role, ss.Peer)
			state := ss.State
			if !slices.Contains(bgpStates, state) { // bound the label's values
				state = "unknown"
			}
			for _, st := range bgpStates {
				ch <- prometheus.MustNewConstMetric(descSessState, prometheus.GaugeValue, b01(st == state), c.role, ss.Peer, st)
			}
		}
	}
}

func (c statusCollector) bandwidth(ch chan<- prometheus.Metric, b *model.BandwidthStatus) {
	ch <- prometheus.MustNewConstMetric(descBWManaged, prometheus.GaugeValue, b01(b.Mode == "managed"), c.role)
	if b.LimitsAgeMS >= 0 {
		ch <- prometheus.MustNewConstMetric(descBWLimitAge, prometheus.GaugeValue, float64(b.LimitsAgeMS)/1000, c.role)
	}
	for ev, n := range map[string]uint64{"reports": b.Reports, "report_errors": b.ReportErrors, "limit_reads": b.LimitReads,
		"limit_errors": b.LimitErrors, "ignored": b.Ignored, "clamped": b.Clamped, "apply_errors": b.ApplyErrors,
		"counter_errors": b.CounterErrors, "static_fallbacks": b.StaticFallbacks} {
		ch <- prometheus.MustNewConstMetric(descBWEvents, prometheus.CounterValue, float64(n), c.role, ev)
	}
	for eip, e := range b.EIPs {
		ch <- prometheus.MustNewConstMetric(descBWLimit, prometheus.GaugeValue, float64(e.Limit)/8, c.role, eip)
		if e.Rate != nil {
			ch <- prometheus.MustNewConstMetric(descBWRate, prometheus.GaugeValue, float64(*e.Rate)/8, c.role, eip)
		}
		ch <- prometheus.MustNewConstMetric(descBWDropB, prometheus.CounterValue, float64(e.DroppedBytes), c.role, eip)
		ch <- prometheus.MustNewConstMetric(descBWDropP, prometheus.CounterValue, float64(e.DroppedPackets), c.role, eip)
		ch <- prometheus.MustNewConstMetric(descBWEIPMode, prometheus.GaugeValue, b01(e.Mode == "managed"), c.role, eip, "managed")
		ch <- prometheus.MustNewConstMetric(descBWEIPMode, prometheus.GaugeValue, b01(e.Mode == "static"), c.role, eip, "static")
	}
}

// monitorModes are the monitor's modes (--monitor).
var monitorModes = []string{"off", "drops", "trace"}

// bgpStates are the session states of internal/bgp (sessionState).
var bgpStates = []string{"idle", "connect", "active", "opensent", "openconfirm", "established", "unknown"}

func b01(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
