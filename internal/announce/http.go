package announce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/nodemetrics"
)

// ListenLoopback opens the status/metrics listener. addr must be a
// loopback IP and a port ("127.0.0.1:9465", "[::1]:9465"): the page shows
// which checks fail and lets nothing be changed, but it is not meant for
// other machines, and nothing else authenticates its readers.
func ListenLoopback(addr string) (net.Listener, error) {
	ap, err := checkLoopback(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("status listener: %w", err)
	}
	return ln, nil
}

// CheckLoopback checks a status listener's address as ListenLoopback
// does, without listening.
func CheckLoopback(addr string) error {
	_, err := checkLoopback(addr)
	return err
}

func checkLoopback(addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ap, fmt.Errorf("status listener %q: want a loopback IP and port, e.g. 127.0.0.1:9469", addr)
	}
	if !ap.Addr().IsLoopback() {
		return ap, fmt.Errorf("status listener %q: must be a loopback address (127.0.0.0/8 or ::1)", addr)
	}
	return ap, nil
}

// Serve serves Handler on ln until ctx ends, with the timeouts and header
// bound of the other roles' metrics servers.
func (a *Announcer) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler serves GET /metrics (Prometheus) and GET /status (JSON).
func (a *Announcer) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(nodemetrics.WithNode(reg, a.cfg.Node), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(a.Status(ctx))
	})
	return mux
}

type collector struct{ a *Announcer }

var (
	descAnnounced = prometheus.NewDesc("azgate_announce_announced", "1 while some BGP peer has the VIP: every check up and at least one established session advertising it.", []string{"vip"}, nil)
	descWanted    = prometheus.NewDesc("azgate_announce_wanted", "1 while the announcer wants the VIP announced (every check up), whether or not a BGP session carries it.", []string{"vip"}, nil)
	descChanges   = prometheus.NewDesc("azgate_announce_changes_total", "Announcements and withdrawals of the VIP.", []string{"vip"}, nil)
	descCheckUp   = prometheus.NewDesc("azgate_announce_check_up", "1 while the check is up (after rise successes), 0 after fall failures.", []string{"check"}, nil)
	descChecks    = prometheus.NewDesc("azgate_announce_checks_total", "Checks run.", []string{"check"}, nil)
	descFailures  = prometheus.NewDesc("azgate_announce_check_failures_total", "Checks that failed.", []string{"check"}, nil)
	descSession   = prometheus.NewDesc("azgate_announce_bgp_session_established", "1 while the BGP session to the peer is established.", []string{"peer"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAnnounced, descWanted, descChanges, descCheckUp, descChecks, descFailures, descSession} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := c.a.Status(ctx)
	// The VIPs go together (one decision for all): one series each.
	for _, v := range st.VIPs {
		ch <- prometheus.MustNewConstMetric(descAnnounced, prometheus.GaugeValue, b2f(st.PeersHave()), v)
		ch <- prometheus.MustNewConstMetric(descWanted, prometheus.GaugeValue, b2f(st.Announced), v)
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(st.Changes), v)
	}
	for _, k := range st.Checks {
		ch <- prometheus.MustNewConstMetric(descCheckUp, prometheus.GaugeValue, b2f(k.Up), k.Check)
		ch <- prometheus.MustNewConstMetric(descChecks, prometheus.CounterValue, float64(k.Checks), k.Check)
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(k.Failures), k.Check)
	}
	for _, s := range st.BGP.Sessions {
		ch <- prometheus.MustNewConstMetric(descSession, prometheus.GaugeValue, b2f(s.State == "established"), s.Peer)
	}
}

// PeersHave reports whether some peer has the VIP: the announcer wants it
// announced and at least one established session has advertised a prefix.
// Wanting is not having: with no session up the route is nowhere, and an
// alert on azgate_announce_announced must see that.
func (st Status) PeersHave() bool {
	if !st.Announced || st.BGP == nil {
		return false
	}
	for _, s := range st.BGP.Sessions {
		if s.State == "established" && s.Advertised > 0 {
			return true
		}
	}
	return false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
