// Package health runs an edge's health checks of service backends (TCP
// connect, HTTP(S) status, UDP reply, a command the edge's configuration
// lists) with interval, timeout, rise and fall, and publishes each
// backend's verdict under
// model.HealthReportKey with a lease of the edge's: the controller turns
// the majority of the edges' verdicts into the service's Health object.
package health

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Target is one backend to check.
type Target struct {
	Service, Pool, Backend string // Backend: model.Backend.Key()
	Addr                   netip.AddrPort
	Check                  model.HealthCheck
	// Tunnel, for an encap-mode backend, says how the probe reaches the
	// guest through NVGRE (tunnel.go); nil: Addr is reached directly.
	Tunnel *Tunnel
}

func (t Target) id() string { return t.Service + "/" + t.Pool + "/" + t.Backend }

// Publisher stores verdicts (StorePublisher: in the store).
type Publisher interface {
	// Publish makes r t's current verdict. It fails if ctx has ended.
	Publish(ctx context.Context, t Target, r model.HealthReport) error
	// Remove deletes t's verdict: t is no longer checked. It must not
	// block (the Manager calls it holding its lock).
	Remove(t Target)
}

// Manager keeps one checker per target.
type Manager struct {
	pub  Publisher
	log  *slog.Logger
	ctx  context.Context
	mu   sync.Mutex
	runs map[string]*checker
	cmds Commands
	// problems: targets not checked here (a command this edge does not
	// list), one line per service and pool.
	problems []string
	// cmdSlots bounds the commands running at once, over all targets
	// (SetCommandConcurrency).
	cmdSlots chan struct{}
	// cmdWaits counts command runs that waited for a slot.
	cmdWaits atomic.Int64
	// durations are the probe durations per service pool and result
	// (Durations), since the pool's first checked target: kept while
	// the pool has a target checked, dropped with its last.
	durMu     sync.Mutex
	durations map[poolResult]*durationHist
}

// DefaultCommandConcurrency is how many health-check commands an edge runs
// at once by default: twice its CPUs. A check whose turn comes while all
// run waits for one (its interval stretches; it never runs twice at once).
func DefaultCommandConcurrency() int { return 2 * runtime.NumCPU() }

type checker struct {
	t      Target
	cancel context.CancelFunc
	stats  *targetStats
}

// targetStats are a checker's figures (Manager.Stats).
type targetStats struct {
	mu       sync.Mutex
	known    bool // up is a verdict (after rise or fall results)
	up       bool
	ok, fail uint64
	last     time.Duration // the last probe's duration
}

// NewManager returns a manager publishing through pub until ctx ends;
// then it stops its checkers and removes their verdicts.
func NewManager(ctx context.Context, pub Publisher, log *slog.Logger) *Manager {
	m := &Manager{pub: pub, log: log, ctx: ctx, runs: map[string]*checker{},
		cmdSlots: make(chan struct{}, DefaultCommandConcurrency()), durations: map[poolResult]*durationHist{}}
	context.AfterFunc(ctx, func() { m.Update(nil) })
	return m
}

// SetCommands sets the commands this edge may run for command checks
// (call it before the first Update). A check naming any other command is
// never run: Problems reports it.
func (m *Manager) SetCommands(c Commands) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmds = c
}

// SetCommandConcurrency sets how many commands may run at once (n < 1:
// DefaultCommandConcurrency); call it before the first Update.
func (m *Manager) SetCommandConcurrency(n int) {
	if n < 1 {
		n = DefaultCommandConcurrency()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmdSlots = make(chan struct{}, n)
}

// CommandWaits is how many command runs have waited for a free slot.
func (m *Manager) CommandWaits() int64 { return m.cmdWaits.Load() }

// Problems lists the service pools whose checks this edge cannot run
// (their command is not listed here), for the node status.
func (m *Manager) Problems() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.problems)
}

// Update starts checkers for new or changed targets and stops the others,
// removing the verdicts of the targets that are gone. A changed target
// keeps its verdict until its new checker reaches one. After the
// manager's ctx has ended it only stops and removes.
func (m *Manager) Update(targets []Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]Target{}
	var problems []string
	seen := map[string]bool{}
	if m.ctx.Err() == nil {
		for _, t := range targets {
			if t.Check.Type == model.CheckCommand {
				if _, ok := m.cmds[string(t.Check.Command)]; !ok {
					// Never run: no verdict from this edge (it
					// abstains), a problem in its status instead.
					if p := unlisted(t); !seen[p] {
						seen[p] = true
						problems = append(problems, p)
						if slices.Contains(m.problems, p) {
							continue // already logged
						}
						m.log.Warn("health check names a command this edge does not list", "service", t.Service, "pool", t.Pool, "command", string(t.Check.Command))
					}
					continue
				}
			}
			want[t.id()] = t
		}
	}
	sort.Strings(problems)
	m.problems = problems
	for id, c := range m.runs {
		t, ok := want[id]
		if ok && same(t, c.t) {
			continue
		}
		c.cancel() // before Remove: a Publish of the stopped checker then fails
		delete(m.runs, id)
		if !ok {
			m.pub.Remove(c.t)
		}
	}
	m.dropDurations(want)
	for id, t := range want {
		if _, ok := m.runs[id]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		ts := &targetStats{}
		m.runs[id] = &checker{t: t, cancel: cancel, stats: ts}
		go m.run(ctx, t, ts)
	}
}

func same(a, b Target) bool {
	ja, _ := json.Marshal(a.Check)
	jb, _ := json.Marshal(b.Check)
	return a.Addr == b.Addr && string(ja) == string(jb) && sameTunnel(a.Tunnel, b.Tunnel)
}

// TargetStats are one target's checks on this edge.
type TargetStats struct {
	Service, Pool, Backend string
	// Known: Up is the edge's verdict (after rise or fall results).
	Known, Up bool
	// OK and Failed count the probes by result; LastDuration is the last
	// probe's (a failed one's: until it failed or timed out).
	OK, Failed   uint64
	LastDuration time.Duration
}

// Stats returns the figures of every target checked, by service, pool
// and backend.
func (m *Manager) Stats() []TargetStats {
	m.mu.Lock()
	out := make([]TargetStats, 0, len(m.runs))
	for _, c := range m.runs {
		c.stats.mu.Lock()
		out = append(out, TargetStats{Service: c.t.Service, Pool: c.t.Pool, Backend: c.t.Backend, Known: c.stats.known, Up: c.stats.up,
			OK: c.stats.ok, Failed: c.stats.fail, LastDuration: c.stats.last})
		c.stats.mu.Unlock()
	}
	m.mu.Unlock()
	// Compared in place, not as joined keys: a scrape sorts every
	// target, and a key per comparison is garbage for nothing.
	slices.SortFunc(out, func(a, b TargetStats) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Pool, b.Pool), strings.Compare(a.Backend, b.Backend))
	})
	return out
}

// Targets returns the checked targets.
func (m *Manager) Targets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.runs)
}

func (m *Manager) run(ctx context.Context, t Target, ts *targetStats) {
	c := t.Check
	interval, timeout := time.Duration(c.Interval), time.Duration(c.Timeout)
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if c.Type == model.CheckCommand && interval < model.MinCommandInterval {
		// The model refuses it; a stored object that bypassed the API
		// is held to the same minimum here.
		interval = model.MinCommandInterval
	}
	if timeout <= 0 || timeout >= interval {
		timeout = min(time.Second, interval/2)
	}
	m.mu.Lock()
	slots := m.cmdSlots
	m.mu.Unlock()
	rise, fall := max(c.Rise, 1), max(c.Fall, 1)
	var up *bool // unknown until rise or fall successive results
	okRun, badRun := 0, 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		// One probe of a target at a time: the next starts after this one
		// ends (the ticker drops the ticks in between). A command first
		// takes one of the edge's command slots; its timeout starts then.
		release := func() {}
		if c.Type == model.CheckCommand {
			select {
			case slots <- struct{}{}:
			default:
				m.cmdWaits.Add(1)
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
			release = func() { <-slots }
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := m.probe(pctx, t)
		took := time.Since(start)
		cancel()
		release()
		if ctx.Err() != nil {
			return
		}
		ts.mu.Lock()
		ts.last = took
		if err == nil {
			ts.ok++
		} else {
			ts.fail++
		}
		ts.mu.Unlock()
		m.observe(ctx, t, err == nil, took)
		if err == nil {
			okRun, badRun = okRun+1, 0
		} else {
			okRun, badRun = 0, badRun+1
		}
		var next *bool
		switch {
		case okRun >= rise && (up == nil || !*up):
			v := true
			next = &v
		case badRun >= fall && (up == nil || *up):
			v := false
			next = &v
		}
		if next != nil {
			up = next
			detail := "ok"
			if err != nil {
				detail = err.Error()
			}
			r := model.HealthReport{Up: *up, Since: time.Now().UTC(), Detail: detail}
			perr := m.pub.Publish(ctx, t, r)
			if ctx.Err() != nil {
				return // stopped: the verdict is removed, not published
			}
			if perr != nil {
				m.log.Warn("health report not published", "backend", t.id(), "err", perr)
				up = nil // try again next time
			} else {
				ts.mu.Lock()
				ts.known, ts.up = true, *up
				ts.mu.Unlock()
				m.log.Info("backend health", "service", t.Service, "pool", t.Pool, "backend", t.Backend, "up", *up, "detail", detail)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe runs one check of t, through the tunnel where t has one (t.dial);
// a command's output goes to the debug log only.
func (m *Manager) probe(ctx context.Context, t Target) error {
	if t.Check.Type != model.CheckCommand {
		return ProbeWith(ctx, t.dial, t.Addr, t.Check, nil)
	}
	m.mu.Lock()
	c, ok := m.cmds[string(t.Check.Command)]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("command %q is not listed on this edge", string(t.Check.Command))
	}
	out, err := runCommand(ctx, c, t.Addr)
	if err != nil && m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("health command failed", "backend", t.id(), "err", err, "output_bytes", out.total, "output_head", string(out.buf))
	}
	return err
}

// Probe runs one check against addr. A command check runs the command of
// cmds it names, and fails if cmds does not list it.
func Probe(ctx context.Context, addr netip.AddrPort, c model.HealthCheck, cmds Commands) error {
	var d net.Dialer
	return ProbeWith(ctx, d.DialContext, addr, c, cmds)
}

// ProbeWith runs one check against addr, opening its connections with
// dial (Target.dial: through the tunnel).
func ProbeWith(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error), addr netip.AddrPort, c model.HealthCheck, cmds Commands) error {
	switch c.Type {
	case "tcp":
		conn, err := dial(ctx, "tcp", addr.String())
		if err != nil {
			return err
		}
		return conn.Close()
	case "http", "https":
		path := c.Path
		if path == "" {
			path = "/"
		}
		want := c.Status
		if want == 0 {
			want = http.StatusOK
		}
		tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // a check, not a client: any certificate
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Type+"://"+addr.String()+path, nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("HTTP %d, want %d", resp.StatusCode, want)
		}
		return nil
	case "udp":
		conn, err := dial(ctx, "udp", addr.String())
		if err != nil {
			return err
		}
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		payload := c.Send
		if payload == "" {
			payload = "azgate health check"
		}
		if _, err := conn.Write([]byte(payload)); err != nil {
			return err
		}
		buf := make([]byte, 2048)
		if _, err := conn.Read(buf); err != nil {
			return fmt.Errorf("no UDP reply: %w", err)
		}
		return nil
	case "command":
		cmd, ok := cmds[string(c.Command)]
		if !ok {
			return fmt.Errorf("command %q is not listed on this edge", string(c.Command))
		}
		_, err := runCommand(ctx, cmd, addr)
		return err
	}
	return fmt.Errorf("unknown check type %q", c.Type)
}
