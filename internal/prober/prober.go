// Package prober is the path-computation prober (issue 11; docs/prober.md):
// it runs at an edge or a relay, measures the hops from there to the
// relays and origins it is given (TCP connect time and failures), and
// reports them to pathd as pathcomp.Measurements.
//
// It finds pathd by name through the GSLB DNS (so it reports to its
// nearest healthy region and moves when that region fails) and never
// loses a report to a failure on the way: a batch stays queued until a
// pathd answered 2xx for it. The queue is bounded (oldest dropped and
// counted) so a long outage costs memory only up to MaxQueue.
//
// It opens no listening socket (its /metrics is the command's, off by
// default).
package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// Target is one hop end the prober measures: a relay, or an origin.
type Target struct {
	Name   string // pathcomp node name
	Addr   string // IP:port to connect to, [IPv6]:port for IPv6 (the prober resolves no target name)
	Origin bool
}

// Config is a prober's whole configuration.
type Config struct {
	// Node is the name of the edge or relay the prober runs at: the
	// From of every measurement.
	Node    string
	Targets []Target
	// Interval between rounds; every target is measured once per round.
	Interval time.Duration
	// Probes is the number of TCP connects per target per round; loss is
	// the fraction that failed, RTT the median of the others.
	Probes int
	// Timeout of one connect.
	Timeout time.Duration
	// ReportURL is pathd's report endpoint, e.g.
	// http://pathd.example:8080/v1/reports. A host name is resolved
	// through DNS (below); an IP is used as it is.
	ReportURL string
	// DNS servers (host:port) the report host is resolved through. Empty
	// with a host name: the system resolver (no TTL; re-resolved every
	// MinTTL).
	DNS []string
	// ReportFamily is the address family of the report host tried first:
	// "ipv4" (or ""): A, then AAAA when the name has no A record; "ipv6":
	// AAAA, then A (a prober with IPv6 only, reporting to a dual-stack
	// pathd name).
	ReportFamily string
	// Token is sent as "Authorization: Bearer TOKEN".
	Token string
	// MaxQueue bounds the measurements waiting for pathd.
	MaxQueue int
	// Batch is the most measurements per POST.
	Batch int
	// PostTimeout bounds one POST (connect, send, answer).
	PostTimeout time.Duration
	Log         *slog.Logger
	// Dial is how targets are connected (nil: net.Dialer). Tests and
	// source binding.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults.
const (
	DefaultInterval    = 5 * time.Second // pathcomp's ReportInterval
	DefaultProbes      = 5
	DefaultTimeout     = time.Second
	DefaultMaxQueue    = 100_000
	DefaultBatch       = 1_000
	DefaultPostTimeout = 2 * time.Second
	// MinTTL and MaxTTL clamp the DNS TTL the report host is cached for:
	// a 0 TTL would resolve before every POST, a day-long one would never
	// follow a failover.
	MinTTL = time.Second
	MaxTTL = 60 * time.Second
	// maxTargets bounds one prober's round.
	maxTargets = 10_000
)

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Probes == 0 {
		c.Probes = DefaultProbes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.PostTimeout == 0 {
		c.PostTimeout = DefaultPostTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Dial == nil {
		d := &net.Dialer{}
		c.Dial = d.DialContext
	}
	return c
}

// Validate checks c, naming the field at fault.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := pathcomp.ValidateName(c.Node); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if len(c.Targets) == 0 {
		return errors.New("targets: none (give at least one relay or origin)")
	}
	if len(c.Targets) > maxTargets {
		return fmt.Errorf("targets: %d, at most %d", len(c.Targets), maxTargets)
	}
	seen := map[string]bool{}
	for i, t := range c.Targets {
		if err := pathcomp.ValidateName(t.Name); err != nil {
			return fmt.Errorf("target %d: name: %w", i, err)
		}
		if t.Name == c.Node {
			return fmt.Errorf("target %s: the prober's own node", t.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("target %s: listed twice", t.Name)
		}
		seen[t.Name] = true
		ap, err := netip.ParseAddrPort(t.Addr)
		if err != nil {
			return fmt.Errorf("target %s: address %q: want IP:port, an IPv6 address in brackets ([2001:db8::1]:443) (%v)", t.Name, t.Addr, err)
		}
		if err := hopAddr(ap.Addr()); err != nil {
			return fmt.Errorf("target %s: address %q: %w", t.Name, t.Addr, err)
		}
	}
	if c.Interval < 100*time.Millisecond {
		return fmt.Errorf("interval %v: at least 100ms", c.Interval)
	}
	if c.Probes < 1 || c.Probes > 100 {
		return fmt.Errorf("probes %d: want 1..100", c.Probes)
	}
	if c.Timeout <= 0 || c.Timeout > c.Interval || c.Timeout > 10*time.Second {
		return fmt.Errorf("timeout %v: want more than 0, at most 10s and at most the interval %v", c.Timeout, c.Interval)
	}
	if c.PostTimeout <= 0 || c.PostTimeout > time.Minute {
		return fmt.Errorf("post timeout %v: want more than 0 and at most 1m", c.PostTimeout)
	}
	if c.MaxQueue < c.Batch || c.Batch < 1 || c.Batch > 10_000 {
		return fmt.Errorf("batch %d and queue %d: want 1 ≤ batch ≤ 10000 and batch ≤ queue", c.Batch, c.MaxQueue)
	}
	u, err := url.Parse(c.ReportURL)
	if err != nil {
		return fmt.Errorf("report URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("report URL %q: want http(s)://HOST[:PORT]/PATH", c.ReportURL)
	}
	if u.User != nil {
		return fmt.Errorf("report URL %q: no user info (the token goes in --token-file)", c.ReportURL)
	}
	// (url.Parse refuses an http(s) URL with an unbracketed IPv6 host.)
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := hopAddr(a); err != nil {
			return fmt.Errorf("report URL %q: %w", c.ReportURL, err)
		}
	}
	switch c.ReportFamily {
	case "", "ipv4", "ipv6":
	default:
		return fmt.Errorf("report family %q: want ipv4 or ipv6", c.ReportFamily)
	}
	for _, s := range c.DNS {
		if _, err := netip.ParseAddrPort(s); err != nil {
			return fmt.Errorf("DNS server %q: want IP:port (%v)", s, err)
		}
	}
	return nil
}

// hopAddr checks an address the prober connects to: unicast, no IPv6
// zone (it names an interface of this host, not a hop of the path graph
// other nodes share), not IPv4-mapped (IPv4 is written as IPv4).
func hopAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return fmt.Errorf("no IPv6 zone (%%%s): give a global address", a.Zone())
	case a.Is4In6():
		return fmt.Errorf("an IPv4-mapped IPv6 address: write IPv4 as IPv4 (%v)", a.Unmap())
	case a.IsUnspecified() || a.IsMulticast():
		return fmt.Errorf("%v is not a unicast address", a)
	}
	return nil
}

// Stats are the prober's counters since it started.
type Stats struct {
	Rounds       uint64 // rounds measured
	Measurements uint64 // measurements queued
	Sent         uint64 // measurements a pathd acknowledged (2xx)
	Posts        uint64 // POSTs answered 2xx
	PostErrors   uint64 // POSTs that failed (network, timeout, 5xx, 401): retried
	Rejected     uint64 // measurements refused with 400 (never retried: they are invalid)
	Dropped      uint64 // measurements dropped from a full queue
	Queued       int    // measurements waiting now
	Resolves     uint64 // DNS resolutions of the report host that succeeded
	ResolveErrs  uint64 // ... that failed (the last address is kept)
	Moves        uint64 // times the resolved address changed
	Addr         netip.Addr
}

// Prober measures and reports. Create with New, then Run.
type Prober struct {
	cfg  Config
	url  *url.URL
	host string // the report host, without port
	port string

	mu    sync.Mutex
	queue []queued
	seq   uint64 // of the last measurement queued
	stats Stats
	// kick wakes the sender when a round queued measurements.
	kick chan struct{}

	res *resolver
}

// New checks cfg and returns a Prober.
func New(cfg Config) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	u, _ := url.Parse(cfg.ReportURL)
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p := &Prober{cfg: cfg, url: u, host: u.Hostname(), port: port, kick: make(chan struct{}, 1)}
	p.res = newResolver(p.host, cfg.DNS, cfg.ReportFamily == "ipv6")
	return p, nil
}

// Stats returns a copy of the counters.
func (p *Prober) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Queued = len(p.queue)
	s.Addr = p.res.current()
	return s
}

// Run measures every Interval and sends until ctx ends. What is still
// queued then is lost with the process (logged).
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.sendLoop(ctx) }()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.Round(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			if n := p.Stats().Queued; n > 0 {
				p.cfg.Log.Warn("prober stopping with measurements unsent", "queued", n)
			}
			return
		case <-t.C:
		}
	}
}

// Round measures every target once and queues the measurements.
func (p *Prober) Round(ctx context.Context) {
	ms := make([]pathcomp.Measurement, len(p.cfg.Targets))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, t := range p.cfg.Targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ms[i] = p.measure(ctx, t)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	p.enqueue(ms)
}

// measure connects Probes times to t, one after the other.
func (p *Prober) measure(ctx context.Context, t Target) pathcomp.Measurement {
	var rtts []time.Duration
	for i := 0; i < p.cfg.Probes && ctx.Err() == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		start := time.Now()
		c, err := p.cfg.Dial(cctx, "tcp", t.Addr)
		rtt := time.Since(start)
		cancel()
		if err == nil {
			c.Close()
			rtts = append(rtts, rtt)
		}
	}
	m := pathcomp.Measurement{From: p.cfg.Node, To: t.Name, ToOrigin: t.Origin, At: time.Now()}
	if len(rtts) == 0 {
		return m // Available false
	}
	slices.Sort(rtts)
	m.Available = true
	m.RTT = rtts[len(rtts)/2]
	m.Loss = float64(p.cfg.Probes-len(rtts)) / float64(p.cfg.Probes)
	return m
}

// queued is a measurement waiting for pathd, numbered so that an
// acknowledgement removes what was sent even when overflow dropped older
// ones meanwhile.
type queued struct {
	seq uint64
	m   pathcomp.Measurement
}

// enqueue adds measurements, dropping the oldest past MaxQueue.
func (p *Prober) enqueue(ms []pathcomp.Measurement) {
	p.mu.Lock()
	for _, m := range ms {
		p.seq++
		p.queue = append(p.queue, queued{p.seq, m})
	}
	if over := len(p.queue) - p.cfg.MaxQueue; over > 0 {
		p.queue = slices.Delete(p.queue, 0, over)
		p.stats.Dropped += uint64(over)
	}
	p.stats.Rounds++
	p.stats.Measurements += uint64(len(ms))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}
