// Package announce is the health-checked route announcer (issue 11 part
// 3, docs/announce.md; the role Quagga plays in the design): it runs on
// each server of a cluster and announces the cluster's VIPs (an IPv4 /32,
// an IPv6 /128 over MP-BGP, or both: a dual-stack cluster's A and AAAA
// addresses) over BGP to the region's router while every local check
// passes, so the router's ECMP spreads flows over the healthy servers only. It withdraws the route at
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
	// VIPs are the cluster's addresses, IPv4 /32s and IPv6 /128s,
	// announced and withdrawn together (one set of checks decides for
	// all: a dual-stack cluster's servers answer on both).
	VIPs []netip.Prefix
	// BGP is the speaker's configuration (router ID, ASNs, peers, next
	// hops: this server's addresses on the router's segment; NextHop6
	// is required for an IPv6 VIP and carries IPv6 unicast over MP-BGP).
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
	if len(c.VIPs) == 0 {
		return errors.New("announce: vips: at least one")
	}
	seenVIP := map[netip.Prefix]bool{}
	for _, v := range c.VIPs {
		if err := CheckVIP(v); err != nil {
			return fmt.Errorf("announce: vip %w", err)
		}
		if seenVIP[v] {
			return fmt.Errorf("announce: vip %v: listed twice", v)
		}
		seenVIP[v] = true
		if v.Addr().Is6() && !c.BGP.NextHop6.IsValid() {
			return fmt.Errorf("announce: vip %v: an IPv6 VIP needs an IPv6 next hop (next_hop6)", v)
		}
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

// CheckVIP reports whether p can be a cluster VIP: an IPv4 /32 or a
// global IPv6 unicast /128 (not IPv4-mapped, no zone, not link-local,
// loopback, multicast or unspecified). The error starts with p.
func CheckVIP(p netip.Prefix) error {
	a := p.Addr()
	switch {
	case !p.IsValid():
		return fmt.Errorf("%v: not a prefix", p)
	case a.Is4():
		if p.Bits() != 32 {
			return fmt.Errorf("%v: an IPv4 VIP is a /32", p)
		}
		if a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return fmt.Errorf("%v: not a unicast address a router can forward to", p)
		}
	case a.Is4In6():
		return fmt.Errorf("%v: an IPv4-mapped IPv6 address: give the IPv4 address (%v)", p, a.Unmap())
	case a.Zone() != "":
		return fmt.Errorf("%v: an address with a zone: a VIP is global", p)
	case a.IsLinkLocalUnicast():
		return fmt.Errorf("%v: a link-local address: a VIP is a global unicast address", p)
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast():
		return fmt.Errorf("%v: not a global unicast address", p)
	case p.Bits() != 128:
		return fmt.Errorf("%v: an IPv6 VIP is a /128", p)
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

// Announcer announces the VIPs while every check passes.
type Announcer struct {
	cfg  Config
	spk  bgp.SpeakerAPI
	log  *slog.Logger
	mon  *probe.Monitor
	kick chan struct{}

	mu        sync.Mutex
	announced bool   // the speaker holds the VIPs
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
	a.log.Info("announce: started", "vips", a.cfg.VIPs, "checks", len(a.cfg.Checks), "peers", len(a.cfg.BGP.Peers))
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
		err = a.spk.Announce(ctx, a.cfg.VIPs)
	} else {
		err = a.spk.Announce(ctx, nil)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		if a.lastErr != err.Error() {
			a.log.Warn("announce: speaker", "vips", a.cfg.VIPs, "announce", want, "err", err)
		}
		a.lastErr = err.Error()
		return
	}
	a.lastErr = ""
	if want != a.announced {
		a.changes++
		if want {
			a.log.Info("announce: every check passes: announcing", "vips", a.cfg.VIPs)
		} else {
			a.log.Warn("announce: checks failing: withdrawn", "vips", a.cfg.VIPs, "down", down)
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
	a.log.Info("announce: withdrawn and stopped", "vips", a.cfg.VIPs, "took", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

// Status is the announcer's state, as /status serves it.
type Status struct {
	VIPs      []string         `json:"vips"`
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
	st := Status{VIPs: []string{}, Announced: a.announced, Changes: a.changes, LastError: a.lastErr, Checks: []CheckStatus{}}
	a.mu.Unlock()
	for _, v := range a.cfg.VIPs {
		st.VIPs = append(st.VIPs, v.String())
	}
	for _, s := range a.mon.States() {
		st.Checks = append(st.Checks, CheckStatus{Check: s.Key, Up: s.Up, Since: s.Since, Checks: s.Checks,
			Failures: s.Failures, LastErr: s.LastErr, LastRTT: s.LastRTT.Seconds()})
	}
	st.BGP = a.spk.Status(ctx)
	st.BGP.Announcing = st.Announced
	return st
}

// Announced reports whether the VIPs are announced.
func (a *Announcer) Announced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.announced
}
