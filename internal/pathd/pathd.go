// Package pathd is the path-computation service (`azgate pathd`, issue 11
// part 4) around the pure core internal/pathcomp: probers POST hop
// measurements, the service smooths them per hop, keeps the figures in a
// hop store shared by the servers of its cluster (Redis, or memory),
// forwards every report it took from a prober once to every other region,
// recomputes the best path per (edge, origin) every interval and answers
// queries. docs/pathd.md has the API, the flags and the failure modes.
package pathd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
	"github.com/azgate/azgate/internal/pathd/hopstore"
)

// Peer is another region's pathd cluster: its VIP's base URL
// (http(s)://host:port), to which /v1/forward is appended.
type Peer struct {
	Region string
	URL    string
}

// Config is a pathd server's settings. Zero values take the defaults
// documented on each field.
type Config struct {
	Region   string // this server's region (= its cluster; the hop store's key part)
	Instance string // this server's name within the region
	// Node labels every /metrics series (node; empty: none): the
	// instance's name (azgate pathd).
	Node string
	// Token authenticates probers and queriers (POST /v1/reports, GET
	// /v1/paths, and /metrics unless MetricsToken): required, at least
	// MinToken bytes.
	Token        string
	MetricsToken string // "" → Token
	// PeerTokens authenticate the other regions' servers (POST
	// /v1/forward): one token per peer region (region → token), shared by
	// the two regions of the pair and used both ways: this server sends
	// it to that region, and takes a forward carrying it as coming from
	// that region. A forward is applied only for sources of the region its
	// token names, so a region, or one of its tokens, in an attacker's
	// hands feeds its own sources only; with one token for all regions
	// any region could mute another's sources (issue 17 part 3). Every
	// Peers region needs one; a region without a Peers entry may send
	// here without being sent to. Each at least MinToken bytes, distinct
	// from each other and from Token.
	PeerTokens map[string]string
	Peers      []Peer
	// Hops is the cluster's hop store; nil: none, the figures live in
	// this process only (no persistence, no sharing with other servers).
	Hops hopstore.Store
	// Recompute is the interval of path recomputes, hop-store flushes
	// and reads of the cluster's changes (default 1 s).
	Recompute time.Duration
	// Expire: hops not reported for this long are forgotten, with nodes
	// left without hops, edges not queried and report sources not heard
	// from (default 10 min).
	Expire     time.Duration
	Store      pathcomp.Config
	Hysteresis pathcomp.Hysteresis
	// MaxBody bounds a request body (default 1 MiB); MaxReports the
	// reports of one POST /v1/reports (default 1,000).
	MaxBody    int64
	MaxReports int
	// QueueLen bounds each peer's forward queue (default 65,536 reports;
	// full: the oldest is dropped and counted); Batch the reports of one
	// forward POST (default 500, at most MaxReports so peers take it).
	QueueLen, Batch int
	// Client sends the forwards (default: 10 s timeout).
	Client *http.Client
	// MaxEdges bounds the edges recomputed (default 4,096).
	MaxEdges int
	Log      *slog.Logger
	Now      func() time.Time // default time.Now
}

// MinToken is the shortest token accepted: 16 bytes (a 128-bit random
// token in hex is 32).
const MinToken = 16

// Check checks the configuration as New does (azgate pathd
// --check-config).
func (c Config) Check() error { return c.check() }

func (c *Config) check() error {
	if err := pathcomp.ValidateName(c.Region); err != nil {
		return fmt.Errorf("pathd: region: %w", err)
	}
	if err := pathcomp.ValidateName(c.Instance); err != nil {
		return fmt.Errorf("pathd: instance: %w", err)
	}
	if len(c.Token) < MinToken {
		return fmt.Errorf("pathd: token: at least %d bytes", MinToken)
	}
	if c.MetricsToken == "" {
		c.MetricsToken = c.Token
	}
	regionOf := map[string]string{} // token → peer region
	for _, r := range slices.Sorted(maps.Keys(c.PeerTokens)) {
		tok := c.PeerTokens[r]
		if err := pathcomp.ValidateName(r); err != nil {
			return fmt.Errorf("pathd: peer token of region %q: %w", r, err)
		}
		if r == c.Region {
			return fmt.Errorf("pathd: peer token of region %s: this server's own region (a token names the other region of a pair)", r)
		}
		if len(tok) < MinToken {
			return fmt.Errorf("pathd: peer token of region %s: at least %d bytes", r, MinToken)
		}
		if tok == c.Token {
			return fmt.Errorf("pathd: peer token of region %s: same as the prober token (a prober could then inject forwarded reports as that region)", r)
		}
		if o, dup := regionOf[tok]; dup {
			return fmt.Errorf("pathd: peer token of region %s: same as region %s's (one token per region pair: a shared one lets either region forward as the other)", r, o)
		}
		regionOf[tok] = r
	}
	seen := map[string]bool{c.Region: true}
	for _, p := range c.Peers {
		if err := pathcomp.ValidateName(p.Region); err != nil {
			return fmt.Errorf("pathd: peer %q: region: %w", p.Region, err)
		}
		if seen[p.Region] {
			return fmt.Errorf("pathd: peer %s: region named twice, or this server's own", p.Region)
		}
		seen[p.Region] = true
		if _, ok := c.PeerTokens[p.Region]; !ok {
			return fmt.Errorf("pathd: peer %s: no peer token for the region", p.Region)
		}
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("pathd: peer %s: url %q: want http(s)://host[:port][/path] without credentials or query", p.Region, p.URL)
		}
	}
	if c.Recompute <= 0 {
		c.Recompute = time.Second
	}
	if c.Expire <= 0 {
		c.Expire = 10 * time.Minute
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 1 << 20
	}
	if c.MaxReports <= 0 {
		c.MaxReports = 1000
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 1 << 16
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	c.Batch = min(c.Batch, c.MaxReports)
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if c.MaxEdges <= 0 {
		c.MaxEdges = 4096
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// counters are what /metrics shows; guarded by Server.mu.
type counters struct {
	local, fwd        outcome
	invalid           [2]uint64 // bodies refused: [local, forward]
	unauth            uint64
	wrongRegion       uint64 // forwarded reports of a source not of the sender's region
	switches          uint64
	recomputes        uint64
	recomputeLast     time.Duration
	forgotHops        uint64
	forgotNodes       uint64
	saveErrors, saved uint64
	loadErrors        uint64
	malformed         uint64
	restored, refused uint64
	changesErrors     uint64
	expireErrors      uint64
	resets            uint64
}

// outcome counts what became of reports.
type outcome struct {
	applied, stale, rejected, duplicate uint64
}

// Server is one pathd server. One mutex (mu) owns the Store, the Dedup,
// the sequence and the dirty set; selMu the Selector, the last Graph and
// the edges, so queries and recomputes do not wait for ingestion.
type Server struct {
	cfg    Config
	source string

	mu      sync.Mutex
	store   *pathcomp.Store
	dedup   *pathcomp.Dedup
	seq     uint64
	dirty   map[[2]string]struct{}
	sources map[string]time.Time // forward sources: last heard
	cnt     counters
	cursor  uint64 // hop store version read up to
	loaded  bool

	selMu sync.RWMutex
	sel   *pathcomp.Selector
	graph *pathcomp.Graph
	edges map[string]*atomic.Int64 // edges queried: last query, Unix ns

	peers []*peer

	health struct { // storeHealth's last Ping
		mu  sync.Mutex
		at  time.Time
		err error
	}
}

// New checks cfg and returns a Server; Run starts its loops and Handler
// serves its API.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	// A new source name per start: the sequence restarts at 1, and the
	// other regions' seen-sets must not take it for a replay.
	src := cfg.Region + "/" + cfg.Instance + "-" + hex.EncodeToString(b)
	if err := pathcomp.ValidateSource(src); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, source: src,
		store: pathcomp.NewStore(cfg.Store), dedup: pathcomp.NewDedup(0),
		dirty: map[[2]string]struct{}{}, sources: map[string]time.Time{},
		sel: pathcomp.NewSelector(cfg.Hysteresis), edges: map[string]*atomic.Int64{},
	}
	for _, p := range cfg.Peers {
		s.peers = append(s.peers, newPeer(p, cfg))
	}
	return s, nil
}

// Source is this server's report source name (REGION/INSTANCE-BOOTID).
func (s *Server) Source() string { return s.source }

// Run loads the cluster's hops, then runs the recompute, hop-store and
// expiry loops and one forwarder per peer until ctx ends.
func (s *Server) Run(ctx context.Context) {
	s.load(ctx)
	s.Recompute()
	var wg sync.WaitGroup
	for _, p := range s.peers {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(ctx, s.cfg) }()
	}
	t := time.NewTicker(s.cfg.Recompute)
	defer t.Stop()
	sweepEvery := min(max(s.cfg.Expire/4, time.Second), time.Minute)
	lastSweep := s.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.flush(fctx) // what this server changed last, for the next to start with
			cancel()
			wg.Wait()
			return
		case <-t.C:
		}
		s.flush(ctx)
		s.pull(ctx)
		s.Recompute()
		if now := s.cfg.Now(); now.Sub(lastSweep) >= sweepEvery {
			lastSweep = now
			s.sweep(ctx, now)
		}
	}
}

// Recompute takes a Snapshot and updates every edge queried recently.
func (s *Server) Recompute() {
	start := time.Now()
	now := s.cfg.Now()
	s.mu.Lock()
	g := s.store.Snapshot(now)
	s.mu.Unlock()
	switched := 0
	s.selMu.Lock()
	s.graph = g
	for e := range s.edges {
		if !g.Has(e) {
			continue
		}
		n, err := s.sel.Update(g, e)
		if err != nil {
			s.cfg.Log.Debug("recompute", "edge", e, "err", err)
		}
		switched += n
	}
	s.selMu.Unlock()
	d := time.Since(start)
	s.mu.Lock()
	s.cnt.recomputes++
	s.cnt.recomputeLast = d
	s.cnt.switches += uint64(switched)
	s.mu.Unlock()
}

// sweep forgets what was not heard from for Expire: hops (here and in the
// hop store), nodes, report sources, and edges not queried.
func (s *Server) sweep(ctx context.Context, now time.Time) {
	cut := now.Add(-s.cfg.Expire)
	s.mu.Lock()
	h, n := s.store.Forget(cut)
	s.cnt.forgotHops += uint64(h)
	s.cnt.forgotNodes += uint64(n)
	for src, t := range s.sources {
		if t.Before(cut) {
			s.dedup.Forget(src)
			delete(s.sources, src)
		}
	}
	g := s.store.Snapshot(now)
	s.mu.Unlock()
	s.selMu.Lock()
	for e, t := range s.edges {
		if t.Load() < cut.UnixNano() {
			delete(s.edges, e)
		}
	}
	s.sel.Retain(g, func(e string) bool { _, ok := s.edges[e]; return ok })
	s.graph = g
	s.selMu.Unlock()
	if s.cfg.Hops == nil {
		return
	}
	if _, err := s.cfg.Hops.Expire(ctx, cut); err != nil {
		s.mu.Lock()
		s.cnt.expireErrors++
		s.mu.Unlock()
		s.cfg.Log.Warn("hop store: expire", "err", err)
	}
}

// Serve serves Handler on ln with the server's timeouts and bounds until
// ctx ends. certFile and keyFile, when set, serve TLS.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(s.cfg.Log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	var err error
	if certFile != "" {
		err = srv.ServeTLS(ln, certFile, keyFile)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
