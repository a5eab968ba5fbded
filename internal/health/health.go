// Package health runs an edge's health checks of service backends (TCP
// connect, HTTP(S) status, UDP reply, a command) with interval, timeout,
// rise and fall, and publishes each backend's verdict under
// model.HealthReportKey with a lease of the edge's: the controller turns
// the majority of the edges' verdicts into the service's Health object.
package health

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
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

// Publisher stores verdicts (EtcdPublisher: in the store).
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
}

type checker struct {
	t      Target
	cancel context.CancelFunc
}

// NewManager returns a manager publishing through pub until ctx ends;
// then it stops its checkers and removes their verdicts.
func NewManager(ctx context.Context, pub Publisher, log *slog.Logger) *Manager {
	m := &Manager{pub: pub, log: log, ctx: ctx, runs: map[string]*checker{}}
	context.AfterFunc(ctx, func() { m.Update(nil) })
	return m
}

// Update starts checkers for new or changed targets and stops the others,
// removing the verdicts of the targets that are gone. A changed target
// keeps its verdict until its new checker reaches one. After the
// manager's ctx has ended it only stops and removes.
func (m *Manager) Update(targets []Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]Target{}
	if m.ctx.Err() == nil {
		for _, t := range targets {
			want[t.id()] = t
		}
	}
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
	for id, t := range want {
		if _, ok := m.runs[id]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		m.runs[id] = &checker{t: t, cancel: cancel}
		go m.run(ctx, t)
	}
}

func same(a, b Target) bool {
	ja, _ := json.Marshal(a.Check)
	jb, _ := json.Marshal(b.Check)
	return a.Addr == b.Addr && string(ja) == string(jb) && sameTunnel(a.Tunnel, b.Tunnel)
}

// Targets returns the checked targets.
func (m *Manager) Targets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.runs)
}

func (m *Manager) run(ctx context.Context, t Target) {
	c := t.Check
	interval, timeout := time.Duration(c.Interval), time.Duration(c.Timeout)
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if timeout <= 0 || timeout >= interval {
		timeout = min(time.Second, interval/2)
	}
	rise, fall := max(c.Rise, 1), max(c.Fall, 1)
	var up *bool // unknown until rise or fall successive results
	okRun, badRun := 0, 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := ProbeWith(pctx, t.dial, t.Addr, c)
		cancel()
		if ctx.Err() != nil {
			return
		}
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

// Probe runs one check against addr.
func Probe(ctx context.Context, addr netip.AddrPort, c model.HealthCheck) error {
	var d net.Dialer
	return ProbeWith(ctx, d.DialContext, addr, c)
}

// ProbeWith runs one check against addr, opening its connections with
// dial (Target.dial: through the tunnel).
func ProbeWith(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error), addr netip.AddrPort, c model.HealthCheck) error {
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
		if len(c.Command) == 0 {
			return fmt.Errorf("no command")
		}
		cmd := exec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
		cmd.Env = append(cmd.Environ(), "AZGATE_BACKEND_ADDR="+addr.Addr().String(), "AZGATE_BACKEND_PORT="+strconv.Itoa(int(addr.Port())))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, trim(out))
		}
		return nil
	}
	return fmt.Errorf("unknown check type %q", c.Type)
}

func trim(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
