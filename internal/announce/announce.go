// Package announce is the health-checked route announcer (issue 11 part
// 3, docs/announce.md; the role Quagga plays in the design): it runs on
// each server of a cluster and announces the cluster's VIP /32 over BGP to
// the region's router while every local check passes, so the router's ECMP
// spreads flows over the healthy servers only. It withdraws the route at
// the check that reaches a check's fall threshold, and on shutdown it
// withdraws and waits until the withdrawal has been sent before the
// process exits.
//
// The BGP speaker is internal/bgp's embedded GoBGP, which never listens:
// the announcer opens no BGP socket anyone can connect to. Its only
// listener is the optional status/metrics one, loopback only.
package announce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/probe"
)

// Config is the announcer's configuration.
type Config struct {
	// Node labels every /metrics series (node; empty: none): the
	// host's name by default (azgate announce).
	Node string
	// VIP is the cluster's address, announced as a /32.
	VIP netip.Prefix
	// BGP is the speaker's configuration (router ID, ASNs, peers, next
	// hop: this server's address on the router's segment).
	BGP bgp.Config
	// Checks must all be up for the VIP to be announced (the
	// application's heartbeat, the Redis port, ...). Their states start
	// down: a server announces only after Rise successes of every check.
	Checks []probe.Target
	// WithdrawWait bounds the wait, on shutdown, for the withdrawal to be
	// sent (zero: 5 s).
	WithdrawWait time.Duration
	// Resync re-applies the decision this often even without a change,
	// so a failed Announce is retried (zero: 5 s).
	Resync time.Duration
	Log    *slog.Logger
}

const (
	defaultWithdrawWait = 5 * time.Second
	defaultResync       = 5 * time.Second
)

// Validate checks the configuration; errors name the field.
func (c Config) Validate() error {
	if !c.VIP.IsValid() || !c.VIP.Addr().Is4() || c.VIP.Bits() != 32 {
		return fmt.Errorf("announce: vip %v: must be an IPv4 /32", c.VIP)
	}
	if err := c.BGP.Validate(); err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	if len(c.BGP.Peers) == 0 {
		return errors.New("announce: peers: at least one BGP peer (the region's router)")
	}
	if len(c.Checks) == 0 {
		return errors.New("announce: checks: at least one (an announcer that checks nothing announces a dead server)")
	}
	seen := map[string]bool{}
	for _, t := range c.Checks {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("announce: check: %w", err)
		}
		if seen[t.Key] {
			return fmt.Errorf("announce: check %q: listed twice", t.Key)
		}
		seen[t.Key] = true
	}
	if c.WithdrawWait < 0 || c.Resync < 0 {
		return fmt.Errorf("announce: withdraw wait %v and resync %v must not be negative", c.WithdrawWait, c.Resync)
	}
	return nil
}

// ParseCheck turns a check URL into a probe target keyed by the URL:
// tcp://ADDR:PORT, http://ADDR[:PORT]/PATH or https://ADDR[:PORT]/PATH.
// ADDR is an IP address (a health check that depends on DNS fails with
// it); an IPv6 one in brackets (http://[2001:db8::1]:8080/healthz),
// without a zone, not IPv4-mapped. base supplies the interval, timeout and thresholds.
func ParseCheck(s string, base probe.Spec) (probe.Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return probe.Target{}, fmt.Errorf("check %q: %w", s, err)
	}
	spec := base
	spec.Kind = probe.Kind(u.Scheme)
	switch spec.Kind {
	case probe.TCP:
		if u.Path != "" || u.RawQuery != "" {
			return probe.Target{}, fmt.Errorf("check %q: a tcp check has no path", s)
		}
	case probe.HTTP, probe.HTTPS:
		spec.Path = u.EscapedPath()
		if spec.Path == "" {
			spec.Path = "/"
		}
		if u.RawQuery != "" {
			spec.Path += "?" + u.RawQuery
		}
	default:
		return probe.Target{}, fmt.Errorf("check %q: scheme %q: want tcp://, http:// or https://", s, u.Scheme)
	}
	if u.User != nil || u.Fragment != "" {
		return probe.Target{}, fmt.Errorf("check %q: no user or fragment", s)
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return probe.Target{}, fmt.Errorf("check %q: host %q: must be an IP address", s, u.Hostname())
	}
	if addr.Is6() && !strings.HasPrefix(u.Host, "[") {
		// url.Parse reads tcp://2001:db8::1:80 as 2001:db8::1 port 80;
		// RFC 3986 §3.2.2 wants the brackets, and so do we: the port of
		// an unbracketed IPv6 address is a guess.
		return probe.Target{}, fmt.Errorf("check %q: IPv6 address %q: write it in brackets, e.g. %s://[%s]:PORT", s, u.Host, u.Scheme, addr.WithZone(""))
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return probe.Target{}, fmt.Errorf("check %q: port %q: must be 1-65535", s, p)
		}
		spec.Port = uint16(n)
	} else if spec.Kind == probe.TCP {
		return probe.Target{}, fmt.Errorf("check %q: a tcp check needs a port", s)
	}
	t := probe.Target{Key: s, Addr: addr, Spec: spec}
	if err := t.Validate(); err != nil {
		return probe.Target{}, err
	}
	return t, nil
}

// Announcer announces the VIP while every check passes.
type Announcer struct {
	cfg  Config
	spk  bgp.SpeakerAPI
	log  *slog.Logger
	mon  *probe.Monitor
	kick chan struct{}

	mu        sync.Mutex
	announced bool   // the speaker holds the VIP
	changes   uint64 // announce/withdraw transitions
	lastErr   string // of the last Announce
}

// New validates cfg and returns an announcer; Run starts it.
func New(cfg Config, spk bgp.SpeakerAPI) (*Announcer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.WithdrawWait == 0 {
		cfg.WithdrawWait = defaultWithdrawWait
	}
	if cfg.Resync == 0 {
		cfg.Resync = defaultResync
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	a := &Announcer{cfg: cfg, spk: spk, log: cfg.Log, kick: make(chan struct{}, 1)}
	a.mon = probe.NewMonitor(probe.Options{
		InitialUp: false,
		OnChange:  func(probe.State) { a.Kick() },
		Logger:    cfg.Log,
	})
	if err := a.mon.Set(cfg.Checks); err != nil {
		return nil, fmt.Errorf("announce: %w", err)
	}
	return a, nil
}

// Kick has the announcer re-evaluate its checks now.
func (a *Announcer) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run configures the speaker, checks, and announces or withdraws the VIP
// as the checks go, until ctx ends. Then it withdraws the VIP, waits
// (at most WithdrawWait) until every established peer was sent the
// withdrawal, stops the speaker (a Cease to each peer) and returns.
func (a *Announcer) Run(ctx context.Context) error {
	if err := a.spk.Configure(ctx, a.cfg.BGP); err != nil {
		a.spk.Stop()
		return err
	}
	a.log.Info("announce: started", "vip", a.cfg.VIP, "checks", len(a.cfg.Checks), "peers", len(a.cfg.BGP.Peers))
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan struct{})
	go func() {
		a.mon.Run(mctx)
		close(mdone)
	}()
	t := time.NewTicker(a.cfg.Resync)
	defer t.Stop()
	for ctx.Err() == nil {
		a.apply(ctx)
		select {
		case <-ctx.Done():
		case <-a.kick:
		case <-t.C:
		}
	}
	err := a.shutdown()
	mcancel()
	<-mdone
	return err
}

// healthy reports whether every check is up, and the ones down.
func (a *Announcer) healthy() (bool, []string) {
	var down []string
	st := a.mon.States()
	for _, s := range st {
		if !s.Up {
			down = append(down, s.Key)
		}
	}
	return len(st) == len(a.cfg.Checks) && len(down) == 0, down
}

// apply announces or withdraws the VIP as the checks say.
func (a *Announcer) apply(ctx context.Context) {
	want, down := a.healthy()
	var err error
	if want {
		err = a.spk.Announce(ctx, []netip.Prefix{a.cfg.VIP})
	} else {
		err = a.spk.Announce(ctx, nil)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		if a.lastErr != err.Error() {
			a.log.Warn("announce: speaker", "vip", a.cfg.VIP, "announce", want, "err", err)
		}
		a.lastErr = err.Error()
		return
	}
	a.lastErr = ""
	if want != a.announced {
		a.changes++
		if want {
			a.log.Info("announce: every check passes: announcing", "vip", a.cfg.VIP)
		} else {
			a.log.Warn("announce: checks failing: withdrawn", "vip", a.cfg.VIP, "down", down)
		}
	}
	a.announced = want
}

// shutdown runs in Run's goroutine after its last apply.
func (a *Announcer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.WithdrawWait+time.Second)
	defer cancel()
	var errs []error
	start := time.Now()
	if err := a.spk.Announce(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	if err := a.spk.WaitWithdrawn(ctx, a.cfg.WithdrawWait); err != nil {
		errs = append(errs, err)
	}
	a.mu.Lock()
	a.announced = false
	a.mu.Unlock()
	a.spk.Stop()
	a.log.Info("announce: withdrawn and stopped", "vip", a.cfg.VIP, "took", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

// Status is the announcer's state, as /status serves it.
type Status struct {
	VIP       string           `json:"vip"`
	Announced bool             `json:"announced"`
	Changes   uint64           `json:"changes"`
	LastError string           `json:"last_error,omitempty"`
	Checks    []CheckStatus    `json:"checks"`
	BGP       *model.BGPStatus `json:"bgp"`
}

// CheckStatus is one check's state.
type CheckStatus struct {
	Check    string    `json:"check"`
	Up       bool      `json:"up"`
	Since    time.Time `json:"since,omitzero"`
	Checks   uint64    `json:"checks"`
	Failures uint64    `json:"failures"`
	LastErr  string    `json:"last_error,omitempty"`
	LastRTT  float64   `json:"last_rtt_seconds"`
}

// Status returns the announcer's state.
func (a *Announcer) Status(ctx context.Context) Status {
	a.mu.Lock()
	st := Status{VIP: a.cfg.VIP.String(), Announced: a.announced, Changes: a.changes, LastError: a.lastErr, Checks: []CheckStatus{}}
	a.mu.Unlock()
	for _, s := range a.mon.States() {
		st.Checks = append(st.Checks, CheckStatus{Check: s.Key, Up: s.Up, Since: s.Since, Checks: s.Checks,
			Failures: s.Failures, LastErr: s.LastErr, LastRTT: s.LastRTT.Seconds()})
	}
	st.BGP = a.spk.Status(ctx)
	st.BGP.Announcing = st.Announced
	return st
}

// Announced reports whether the VIP is announced.
func (a *Announcer) Announced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.announced
}
