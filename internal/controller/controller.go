// Package controller is the controller role: it serves the REST API under
// /v1, checks every change against the whole desired state and writes it
// to the store (etcd, embedded by default).
//
// The controller is a Core (core.go: the state, the store, the writes, the
// health and DDoS loops; methods that take and return model values and
// the typed errors of errors.go, with the pure rules of rules.go) behind
// an HTTP layer whose handlers decode a request, call one Core method and
// encode the answer (errorAnswer for errors), as GoBGP's API forwards to
// its BgpServer.
//
// The controller keeps a view of the state (a model.State and the store
// revision it reflects) fed by store.Follow, so reads never touch etcd.
// Writes are serialized by one mutex: a write applies its change to the
// view with State.Put/Delete (which check references and return undo
// functions), takes it back out (so readers never see an uncommitted
// change nor wait for the store), commits the changed objects at the
// view's revision and, once the store took them, puts them in the view
// again with the new revision. store.Commit fails with ErrConflict if anyone committed after that
// revision (another controller, another tool); the write then undoes its
// change, waits until the view has caught up with the newer commit and
// tries again, a bounded number of times. Any other commit error undoes
// the change and forces a full reload, since the store may or may not have
// taken it. The watch delivers the controller's own commits too: changes
// at or below the view's revision are already in it and are skipped, and
// a full reload older than the view is ignored.
package controller

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdembed"
)

// Defaults.
const (
	DefaultDataDir = "/var/lib/azgate"
	DefaultListen  = "127.0.0.1:7080"
	// DefaultMaxBodyBytes fits the largest document the benchmarks apply
	// (1,000 hosts x 1,000 guests and 1,000,000 bound EIPs, as
	// internal/bench/control.go builds it) with margin: 116 MiB of compact
	// JSON (what the CLI sends), 117 MiB of YAML, 218 MiB of JSON indented
	// by two spaces (TestBodyLimitFitsMillionEIPs measures the first).
	// A body is held in memory while it is parsed, so the limit is also
	// what one request may cost.
	DefaultMaxBodyBytes = 384 << 20
	// DefaultMaxConns caps the API's concurrent connections on each
	// listener (TCP, unix socket); more wait to be accepted.
	DefaultMaxConns = 256
	// MinMaxConnsPerSource is the least per-source cap the default
	// (MaxConns/8) gives: loopback clients (the CLI, the lab's) all come
	// from 127.0.0.1.
	MinMaxConnsPerSource = 8
	// HTTP timeouts (see Config).
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 5 * time.Minute
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	// DefaultMoveGrace is how long the command line's controller keeps a
	// copy an object's move took out of a set's scope (--move-grace,
	// linger.go): longer than a /32's withdrawal takes to reach the
	// routers upstream. MaxMoveGrace bounds the setting.
	DefaultMoveGrace = 10 * time.Second
	MaxMoveGrace     = 10 * time.Minute
	// DefaultDriftGrace is how long the command line's controller lets
	// the connections open at an EIP's move drain on its previous host
	// (--drift-grace, drain.go). MaxDriftGrace bounds the setting.
	DefaultDriftGrace = 10 * time.Second
	MaxDriftGrace     = 10 * time.Minute
	// TokenFile is the token's file name inside the data directory.
	TokenFile = "token"
)

// Config of the controller. The zero value serves the API on
// 127.0.0.1:7080 with an embedded etcd in /var/lib/azgate.
type Config struct {
	// Node labels every /metrics series (node; empty: none): the
	// host's name by default (azgate controller).
	Node string
	// DataDir holds the token and, for the embedded store, etcd's data.
	DataDir string
	// Listen is the API's TCP address. Empty means DefaultListen, unless
	// ListenUnix is set: then the API is served on the socket alone. Any
	// address given here is used as is, loopback or not: exposing the API
	// is an explicit choice.
	Listen string
	// ListenUnix is an optional unix socket path for the API.
	ListenUnix string
	// TLSCert and TLSKey (PEM files, both or neither) make the TCP
	// listener serve HTTPS.
	TLSCert, TLSKey string
	// EtcdEndpoints of an external etcd cluster. Empty: start an embedded
	// single-node etcd with its data in DataDir, reachable at
	// unix://DataDir/etcd.sock (and EtcdListen, if given).
	EtcdEndpoints []string
	// EtcdListen is an extra client socket (unix:///path) of the embedded
	// etcd, for roles that reach the store through another path (a socket
	// bind-mounted into a container, say). No TCP: the embedded etcd has no
	// authentication.
	EtcdListen string
	// EtcdAuth holds the TLS and user/password settings for
	// EtcdEndpoints (the embedded etcd's socket needs none).
	EtcdAuth store.ClientAuth
	// TxnOps bounds the operations per etcd transaction: 0 means
	// etcdembed.TxnOps for the embedded store and etcd's default (128)
	// for an external one. It must not exceed the server's --max-txn-ops.
	TxnOps int
	// TokensFile is an optional file of named API tokens with roles
	// (auth.go, parseTokens), besides the data directory's admin token.
	// It is read again when it changes (checked on each request): tokens
	// rotate without a restart.
	TokensFile string
	// MaxListPage bounds the objects one GET /v1/KIND answers (0:
	// DefaultMaxListPage): a list without a limit, or with a larger one,
	// is cut there with a continue token.
	MaxListPage int
	// AuditKeep is how many audit records (audit.go) the store keeps, the
	// newest (0: DefaultAuditKeep).
	AuditKeep int
	// MetricsAuth makes GET /metrics require the API token like /v1 does.
	// Off by default: a Prometheus scraper on the controller's network
	// reads it without credentials, and it shows counts and service
	// names (azgate_controller_backends_down), no object's fields.
	MetricsAuth bool
	// MaxBodyBytes bounds request bodies (0: DefaultMaxBodyBytes); a
	// larger one is refused with 413.
	MaxBodyBytes int64
	// MaxConns caps the API's concurrent connections on each listener:
	// the TCP one and the unix socket have a cap each, so that TCP
	// clients (whose connections count before any token is checked)
	// cannot lock out the local admin (0: DefaultMaxConns). A connection
	// beyond it waits in the listen backlog until one closes.
	MaxConns int
	// MaxConnsPerSource caps the TCP connections from one source address
	// (0: max(MinMaxConnsPerSource, MaxConns/8)); one beyond it is closed
	// at once. It must not exceed MaxConns.
	MaxConnsPerSource int
	// ReadHeaderTimeout bounds reading a request's headers (a client that
	// trickles them, slowloris, is cut off); ReadTimeout the whole
	// request, body included (a 384 MiB body needs 1.3 MB/s under the
	// default); WriteTimeout writing a response, counted from when the
	// handler starts writing it (a long commit does not eat into it);
	// IdleTimeout how long a kept-alive connection may wait for its next
	// request. 0 means the default.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Version is reported by /v1/status.
	Version string
	// Logger receives the controller's logs (nil: slog.Default()).
	Logger *slog.Logger
	// HealthDebounce is how long health verdicts wait after a change in
	// the edges' reports (0: DefaultHealthDebounce).
	HealthDebounce time.Duration
	// DDoS: automatic quarantine of attacked EIPs (ddos.go).
	DDoS DDoSConfig
	// MoveGrace is how long a copy that an object's move took out of an
	// edge set's scope is kept there, with the object's current value,
	// before it is deleted (linger.go; docs/scale.md "Scopes"): the set's
	// edges keep routing it while its route is withdrawn upstream. 0: off
	// (the copy goes with the write that moves the object). The command
	// line's default is DefaultMoveGrace; at most MaxMoveGrace.
	MoveGrace time.Duration
	// DriftGrace is how long a bind that moves an EIP to another host
	// lets the connections open at the move drain on the old host
	// (model.EIP.Previous; drain.go, docs/eip.md "Drift"). 0: off (a
	// drift breaks what is in flight). The command line's default is
	// DefaultDriftGrace; at most MaxDriftGrace.
	DriftGrace time.Duration
}

// check turns the user's config into the one the controller runs with,
// filling defaults; every error names the setting at fault.
// Check checks the configuration as Start does before it opens anything
// (azgate controller --check-config).
func (c Config) Check() error {
	if _, err := c.check(); err != nil {
		return fmt.Errorf("controller config: %w", err)
	}
	return nil
}

func (c Config) check() (Config, error) {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("data dir %q: %w", c.DataDir, err)
	}
	c.DataDir = dir
	if c.Listen == "" && c.ListenUnix == "" {
		c.Listen = DefaultListen
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return c, fmt.Errorf("listen address %q: %w", c.Listen, err)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, errors.New("TLS needs both a certificate and a key file (--tls-cert and --tls-key)")
	}
	if c.TLSCert != "" && c.Listen == "" {
		return c, errors.New("TLS certificate given but no TCP listen address")
	}
	for i, e := range c.EtcdEndpoints {
		if strings.TrimSpace(e) == "" {
			return c, fmt.Errorf("etcd endpoint %d is empty", i+1)
		}
	}
	if c.EtcdAuth != (store.ClientAuth{}) && len(c.EtcdEndpoints) == 0 {
		return c, errors.New("etcd TLS and user settings are for an external etcd (--etcd-endpoints); the embedded one is reached through its socket in the data dir")
	}
	if c.EtcdListen != "" {
		if len(c.EtcdEndpoints) > 0 {
			return c, errors.New("etcd listen URL is for the embedded etcd; it cannot be used with external etcd endpoints")
		}
		u, err := url.Parse(c.EtcdListen)
		if err != nil || u.Scheme != "unix" || u.Host != "" || u.Path == "" {
			return c, fmt.Errorf("etcd listen URL %q: want unix:///path (the embedded etcd has no authentication: no TCP, which every local user could use)", c.EtcdListen)
		}
	}
	switch {
	case c.TxnOps < 0:
		return c, fmt.Errorf("etcd max txn ops %d: must be positive", c.TxnOps)
	case c.TxnOps == 1:
		return c, errors.New("etcd max txn ops 1: a transaction needs at least 2 operations (one is the commit marker)")
	case c.TxnOps == 0 && len(c.EtcdEndpoints) == 0:
		c.TxnOps = etcdembed.TxnOps
	case c.TxnOps > etcdembed.TxnOps && len(c.EtcdEndpoints) == 0:
		return c, fmt.Errorf("etcd max txn ops %d: the embedded etcd accepts at most %d", c.TxnOps, etcdembed.TxnOps)
	}
	if c.MaxBodyBytes < 0 {
		return c, fmt.Errorf("max body bytes %d: must be positive", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxConns < 0 {
		return c, fmt.Errorf("max connections %d: must be positive", c.MaxConns)
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerSource < 0 {
		return c, fmt.Errorf("max connections per source %d: must be positive", c.MaxConnsPerSource)
	}
	if c.MaxConnsPerSource == 0 {
		c.MaxConnsPerSource = min(c.MaxConns, max(MinMaxConnsPerSource, c.MaxConns/8))
	}
	if c.MaxConnsPerSource > c.MaxConns {
		return c, fmt.Errorf("max connections per source %d: more than max connections %d", c.MaxConnsPerSource, c.MaxConns)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"read header timeout", &c.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {"read timeout", &c.ReadTimeout, DefaultReadTimeout},
		{"write timeout", &c.WriteTimeout, DefaultWriteTimeout}, {"idle timeout", &c.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v < 0 {
			return c, fmt.Errorf("%s %v: must be positive", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MoveGrace < 0 || c.MoveGrace > MaxMoveGrace {
		return c, fmt.Errorf("move grace %v: must be between 0 (off) and %v", c.MoveGrace, MaxMoveGrace)
	}
	if c.DriftGrace < 0 || c.DriftGrace > MaxDriftGrace {
		return c, fmt.Errorf("drift grace %v: must be between 0 (off) and %v", c.DriftGrace, MaxDriftGrace)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxListPage == 0 {
		c.MaxListPage = DefaultMaxListPage
	}
	if c.MaxListPage < 0 {
		return c, fmt.Errorf("max list page %d: want a count, 1 or more", c.MaxListPage)
	}
	if c.AuditKeep == 0 {
		c.AuditKeep = DefaultAuditKeep
	}
	if c.AuditKeep < 0 {
		return c, fmt.Errorf("audit-keep %d: want a count, 1 or more", c.AuditKeep)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DDoS, err = c.DDoS.check(); err != nil {
		return c, err
	}
	return c, nil
}

// Server is a running controller: the Core (state, store, writes, health
// and DDoS loops) behind the HTTP API (http.go, handlers).
type Server struct {
	*Core
	token  string    // the data directory's (admin)
	tokens *tokenSet // it and the tokens file's
	// routes lists every route pattern the handler registered
	// (TestEveryRouteNeedsToken walks it).
	routes []string

	// largeBodies holds the one slot of requests with large bodies (see
	// largeBody).
	largeBodies  chan struct{}
	largeWaiting atomic.Int64 // requests waiting for it
	// exports holds the one slot of GET /v1/export (export.go), and
	// exportWaiting counts the exports waiting for it.
	exports       chan struct{}
	exportWaiting atomic.Int64

	tcp, unix net.Listener
	conns     *connLimit // the TCP listener's
	unixConns *connLimit // the unix socket's
	servers   []*http.Server
	closeOnce sync.Once
}

// Run runs the controller until ctx ends or it fails.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	sdnotify.Tell(s.log, sdnotify.Ready) // the store loaded, the API listening
	select {
	case <-ctx.Done():
	case err = <-s.fatal:
		s.log.Error("controller failed", "err", err)
	}
	s.Close()
	return err
}

// Start starts the store (or connects to it), loads the state, creates or
// reads the token and serves the API: open, then serve. ctx bounds the
// start only; the server runs until Close.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	cfg, err = cfg.check()
	if err != nil {
		return nil, fmt.Errorf("controller config: %w", err)
	}
	s := &Server{largeBodies: make(chan struct{}, 1), exports: make(chan struct{}, 1)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.token, err = loadToken(cfg.DataDir); err != nil {
		return nil, err
	}
	if s.tokens, err = newTokenSet(s.token, cfg.TokensFile, cfg.Logger); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if s.Core, err = open(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.serve(); err != nil {
		return nil, err
	}
	s.log.Info("controller started", "version", cfg.Version, "api", s.URL(), "unix", cfg.ListenUnix,
		"store", s.storeKind(), "rev", s.view.revision(), "data_dir", cfg.DataDir)
	return s, nil
}

// open starts the Core: the store, the view loaded from it, the health and
// DDoS loops. cfg is checked (Config.check). On error nothing is left
// running.
func open(ctx context.Context, cfg Config) (_ *Core, err error) {
	c := &Core{cfg: cfg, log: cfg.Logger, started: time.Now(), fatal: make(chan error, 4), followDone: make(chan struct{}),
		linger: newLingerState()}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if err := c.openStore(ctx); err != nil {
		return nil, err
	}
	c.view = newView()
	c.view.log = c.log
	c.metrics = newMetrics(c.view)
	c.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "azgate_controller_scope_lingering_copies",
		Help: "Scope copies kept in an edge set's scope after their object left it, until --move-grace ends (docs/controller.md, Moves between sets).",
	}, func() float64 { return float64(c.linger.count.Load()) }))
	c.health = newHealthAgg(c)
	c.view.onServices = c.health.poke
	var runCtx context.Context
	runCtx, c.stop = context.WithCancel(context.Background())
	go c.follow(runCtx)
	if err := c.view.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("controller: loading the state from the store: %w", err)
	}
	// The scope copies (scopes.go): repaired before any write of this
	// controller when a commit went in without them (the migration from
	// the layout without scopes, a controller of an older release, a
	// commit stopped halfway); compared in the background otherwise.
	c.repairs, c.repairDone = make(chan struct{}, 1), make(chan struct{})
	if err := c.startCopies(ctx); err != nil {
		close(c.repairDone)
		return nil, fmt.Errorf("controller: %w", err)
	}
	go c.repairLoop(runCtx)
	c.linger.done = make(chan struct{})
	go c.lingerLoop(runCtx)
	c.drainWake, c.drainDone = make(chan struct{}, 1), make(chan struct{})
	go c.drainLoop(runCtx)
	c.trimWake, c.trimmerDone = make(chan struct{}, 1), make(chan struct{})
	go c.trimLoop(runCtx)
	c.healthDone = c.health.start(runCtx)
	c.ddos = newDDoSRunner(c, cfg.DDoS)
	c.ddosDone = c.ddos.start(runCtx)
	return c, nil
}

// close stops the Core's loops and releases the store.
func (s *Core) close() {
	if s.stop != nil {
		s.stop()
		<-s.followDone
		if s.repairDone != nil {
			<-s.repairDone
		}
		if s.linger.done != nil {
			<-s.linger.done
		}
		if s.drainDone != nil {
			<-s.drainDone
		}
		if s.trimmerDone != nil {
			<-s.trimmerDone
		}
		if s.healthDone != nil {
			<-s.healthDone
		}
		if s.ddosDone != nil {
			<-s.ddosDone
		}
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.embedded != nil {
		s.embedded.Close()
	}
}

func (s *Core) openStore(ctx context.Context) error {
	endpoints := s.cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		urls := []string{"unix://" + filepath.Join(s.cfg.DataDir, "etcd.sock")}
		if s.cfg.EtcdListen != "" {
			urls = append(urls, s.cfg.EtcdListen)
		}
		e, err := etcdembed.StartWithLog(s.cfg.DataDir, urls, s.log)
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		s.embedded = e
		endpoints = urls[:1]
		go func() {
			if err := <-e.Err(); err != nil {
				s.fatal <- fmt.Errorf("embedded etcd: %w", err)
			}
		}()
	}
	auth := s.cfg.EtcdAuth
	if s.embedded != nil {
		auth = store.ClientAuth{}
	}
	st, err := store.Connect(store.Options{Endpoints: endpoints, TxnOps: s.cfg.TxnOps, Log: s.log, Auth: auth})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	s.store = st
	if err := st.Ping(ctx); err != nil {
		return fmt.Errorf("controller: etcd at %s does not answer: %w", strings.Join(endpoints, ","), err)
	}
	return nil
}

func (s *Core) storeKind() string {
	if s.embedded != nil {
		return "embedded"
	}
	return "external"
}

// follow keeps the view fed; forceReload ends the current Follow so the
// next one starts with a full load.
func (s *Core) follow(ctx context.Context) {
	defer close(s.followDone)
	for ctx.Err() == nil {
		fctx, cancel := context.WithCancel(ctx)
		s.reloadMu.Lock()
		s.reload = cancel
		s.reloadMu.Unlock()
		// The whole store's primary keys, not a scope: the controller
		// validates across kinds and writes every scope's copies
		// (store/scope.go, placement).
		s.store.FollowRevisions(fctx, s.view.handleRevs)
		cancel()
	}
}

func (s *Core) forceReload() {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.reload != nil {
		s.reload()
	}
}

func (s *Server) serve() error {
	h := s.handler()
	s.conns = newConnLimit(s.cfg.MaxConns, s.cfg.MaxConnsPerSource)
	s.unixConns = newConnLimit(s.cfg.MaxConns, 0)
	for _, l := range []struct {
		name string
		c    *connLimit
	}{{"tcp", s.conns}, {"unix", s.unixConns}} {
		labels := prometheus.Labels{"listener": l.name}
		s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "azgate_controller_api_connections", Help: "Open API connections (at most --max-conns per listener).", ConstLabels: labels,
		}, func() float64 { return float64(l.c.open.Load()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "azgate_controller_api_connections_waiting", Help: "Accepted API connections waiting for a slot under --max-conns.", ConstLabels: labels,
		}, func() float64 { return float64(l.c.waiting.Load()) }))
	}
	s.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "azgate_controller_api_connections_refused_total", Help: "TCP API connections closed at accept: their source address held --max-conns-per-source already.",
	}, func() float64 { return float64(s.conns.refused.Load()) }))
	if s.cfg.Listen != "" {
		tl, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("controller: listen on %s: %w", s.cfg.Listen, err)
		}
		// The cap counts TLS handshakes too: it wraps the TCP listener.
		ln := s.conns.listener(tl)
		if !isLoopback(s.cfg.Listen) {
			s.log.Warn("the API is reachable from other machines", "listen", s.cfg.Listen, "tls", s.cfg.TLSCert != "")
		}
		if s.cfg.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
			if err != nil {
				ln.Close()
				return fmt.Errorf("controller: TLS certificate %s / key %s: %w", s.cfg.TLSCert, s.cfg.TLSKey, err)
			}
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		}
		s.tcp = ln
		s.start(ln, h)
	}
	if p := s.cfg.ListenUnix; p != "" {
		if err := removeStaleSocket(p); err != nil {
			return fmt.Errorf("controller: unix socket %s: %w", p, err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("controller: unix socket %s: %w", p, err)
		}
		ul, err := net.Listen("unix", p)
		if err != nil {
			return fmt.Errorf("controller: listen on %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			ul.Close()
			return fmt.Errorf("controller: unix socket %s: %w", p, err)
		}
		ln := s.unixConns.listener(ul)
		s.unix = ln
		s.start(ln, h)
	}
	return nil
}

func (s *Server) start(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.servers = append(s.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.fatal <- fmt.Errorf("serving the API on %s: %w", ln.Addr(), err)
		}
	}()
}

func removeStaleSocket(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return errors.New("exists and is not a socket")
	}
	return os.Remove(p)
}

func isLoopback(hostport string) bool {
	host, _, _ := net.SplitHostPort(hostport)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the API's TCP address ("" without a TCP listener).
func (s *Server) Addr() string {
	if s.tcp == nil {
		return ""
	}
	return s.tcp.Addr().String()
}

// URL is the API's base URL: http(s)://ADDR, or unix:///path without TCP.
func (s *Server) URL() string {
	switch {
	case s.tcp != nil && s.cfg.TLSCert != "":
		return "https://" + s.Addr()
	case s.tcp != nil:
		return "http://" + s.Addr()
	case s.unix != nil:
		return "unix://" + s.cfg.ListenUnix
	}
	return ""
}

// Token is the API's bearer token.
func (s *Server) Token() string { return s.token }

// TokenFile is the file holding the token.
func (s *Server) TokenFile() string { return filepath.Join(s.cfg.DataDir, TokenFile) }

// Store is the controller's store client.
func (s *Server) Store() *store.Store { return s.store }

// Close stops serving and releases the store. It is safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range s.servers {
			if err := srv.Shutdown(ctx); err != nil {
				srv.Close()
			}
		}
		if s.Core == nil {
			return // open failed, and cleaned up after itself
		}
		s.Core.close()
		if s.unix != nil {
			os.Remove(s.cfg.ListenUnix)
		}
		s.log.Info("controller stopped")
	})
	return nil
}

// loadToken reads the API token from dir/token, creating it (32 random
// bytes, hex, mode 0600, in a 0700 directory) on first start. A token
// file others can read is refused rather than used.
func loadToken(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("controller: data dir: %w", err)
	}
	p := filepath.Join(dir, TokenFile)
	b, err := os.ReadFile(p)
	if err == nil {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("controller: token: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return "", fmt.Errorf("controller: token file %s has mode %#o: others may read it; chmod 600 it (or remove it to make a new token)", p, perm)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("controller: token file %s is empty; remove it to make a new token", p)
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("controller: token: %w", err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	tok := hex.EncodeToString(raw)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("controller: token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		os.Remove(p)
		return "", fmt.Errorf("controller: token: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(p)
		return "", fmt.Errorf("controller: token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("controller: token: %w", err)
	}
	return tok, nil
}
