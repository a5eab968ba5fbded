package controller

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// DefaultHealthDebounce is how long the health aggregator waits after a
// change before it recomputes the verdicts: a burst of reports (or a
// flapping check) makes at most one write per period.
const DefaultHealthDebounce = 200 * time.Millisecond

// reportKey names one edge's report on one backend.
type reportKey struct{ edge, service, pool, backend string }

// healthAgg turns the edges' health reports (model.HealthRoot) into one
// Health object per service by majority: a backend is down when more than
// half of the edges reporting on it say down; backends nobody reports on
// are up. A Health object exists only while some backend of its service is
// down; it is written through the controller's commit path, so edges see
// it like any other object.
type healthAgg struct {
	s        *Core
	log      *slog.Logger
	debounce time.Duration
	kick     chan struct{}

	mu      sync.Mutex
	reports map[reportKey]model.HealthReport
	bad     map[string]string // undecodable report keys -> why
}

func newHealthAgg(s *Core) *healthAgg {
	d := s.cfg.HealthDebounce
	if d <= 0 {
		d = DefaultHealthDebounce
	}
	return &healthAgg{s: s, log: s.log.With("part", "health"), debounce: d, kick: make(chan struct{}, 1),
		reports: map[reportKey]model.HealthReport{}, bad: map[string]string{}}
}

// poke asks for a recomputation; it never blocks.
func (a *healthAgg) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// start runs the watch and the aggregation until ctx ends; done is closed
// when both have returned.
func (a *healthAgg) start(ctx context.Context) (done chan struct{}) {
	done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.watch(ctx) }()
	go func() { defer wg.Done(); a.run(ctx) }()
	go func() { wg.Wait(); close(done) }()
	return done
}

// watch keeps a.reports equal to what is under model.HealthRoot: a full
// read, then the watch from the next revision; a broken or compacted watch
// reads everything again.
func (a *healthAgg) watch(ctx context.Context) {
	st := a.s.store
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		kvs, rev, err := st.GetPrefix(ctx, model.HealthRoot)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("reading health reports failed; retrying", "err", err, "in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		a.mu.Lock()
		a.reports, a.bad = map[reportKey]model.HealthReport{}, map[string]string{}
		for _, kv := range kvs {
			a.put(kv.Key, kv.Value)
		}
		a.mu.Unlock()
		a.poke()
		err = st.WatchPrefix(ctx, model.HealthRoot, rev+1, func(cs []store.Change) {
			a.mu.Lock()
			for _, c := range cs {
				if c.Delete {
					a.del(c.Key)
				} else {
					a.put(c.Key, c.Value)
				}
			}
			a.mu.Unlock()
			a.poke()
		})
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("health report watch ended; reading every report again", "err", err)
	}
}

// put records one report; a.mu must be held.
func (a *healthAgg) put(k string, v []byte) {
	edge, svc, pool, backend, ok := model.ParseHealthReportKey(k)
	if !ok {
		a.bad[k] = "not a " + model.HealthRoot + "EDGE/SERVICE/POOL/BACKEND key"
		return
	}
	var r model.HealthReport
	if err := json.Unmarshal(v, &r); err != nil {
		a.bad[k] = err.Error()
		delete(a.reports, reportKey{edge, svc, pool, backend})
		return
	}
	delete(a.bad, k)
	a.reports[reportKey{edge, svc, pool, backend}] = r
}

// del forgets one report; a.mu must be held.
func (a *healthAgg) del(k string) {
	delete(a.bad, k)
	if edge, svc, pool, backend, ok := model.ParseHealthReportKey(k); ok {
		delete(a.reports, reportKey{edge, svc, pool, backend})
	}
}

// tally counts the reports on one backend.
type tally struct{ up, down int }

// isDown is the majority rule.
func (t tally) isDown() bool { return 2*t.down > t.up+t.down }

// tallies counts the reports per service, pool and backend.
func (a *healthAgg) tallies() map[string]map[string]map[string]tally {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]map[string]map[string]tally{}
	for k, r := range a.reports {
		pools := out[k.service]
		if pools == nil {
			pools = map[string]map[string]tally{}
			out[k.service] = pools
		}
		backends := pools[k.pool]
		if backends == nil {
			backends = map[string]tally{}
			pools[k.pool] = backends
		}
		t := backends[k.backend]
		if r.Up {
			t.up++
		} else {
			t.down++
		}
		backends[k.backend] = t
	}
	return out
}

// reportsOn returns every edge's report on one service, by pool and
// backend, each list ordered by edge.
func (a *healthAgg) reportsOn(service string) (map[string]map[string][]edgeReport, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]map[string][]edgeReport{}
	for k, r := range a.reports {
		if k.service != service {
			continue
		}
		if out[k.pool] == nil {
			out[k.pool] = map[string][]edgeReport{}
		}
		out[k.pool][k.backend] = append(out[k.pool][k.backend], edgeReport{k.edge, r})
	}
	for _, backends := range out {
		for _, rs := range backends {
			sort.Slice(rs, func(i, j int) bool { return rs[i].edge < rs[j].edge })
		}
	}
	var bad []string
	for k, why := range a.bad {
		if _, svc, _, _, ok := model.ParseHealthReportKey(k); !ok || svc == service {
			bad = append(bad, k+": "+why)
		}
	}
	sort.Strings(bad)
	return out, bad
}

type edgeReport struct {
	edge string
	r    model.HealthReport
}

// verdict is a service's Health by majority, nil when nothing is down.
// Reports on pools or backends the service does not have are ignored, and
// so are reports on pools without a health check (their backends are
// always up, whatever an edge that has not caught up yet still says).
func verdict(v *model.Service, t map[string]map[string]tally) *model.Health {
	h := &model.Health{Service: v.Name}
	for _, p := range v.Pools {
		if p.Health == nil {
			continue
		}
		var down []string
		for _, b := range p.Backends {
			if k := b.Key(); t[p.Name][k].isDown() {
				down = append(down, k)
			}
		}
		if len(down) > 0 {
			sort.Strings(down)
			if h.Down == nil {
				h.Down = map[string][]string{}
			}
			h.Down[p.Name] = down
		}
	}
	if len(h.Down) == 0 {
		return nil
	}
	return h
}

// run recomputes the verdicts after each poke, at most once per debounce
// period; a failed write is retried a second later.
func (a *healthAgg) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		if !sleep(ctx, a.debounce) {
			return
		}
		select { // changes during the wait are covered by this round
		case <-a.kick:
		default:
		}
		if err := a.reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("writing health verdicts failed; retrying", "err", err)
			go func() {
				if sleep(ctx, time.Second) {
					a.poke()
				}
			}()
		}
	}
}

// reconcile writes the Health objects that differ from the majority view
// and deletes those of services that no longer exist or have nothing down.
func (a *healthAgg) reconcile(ctx context.Context) error {
	t := a.tallies()
	down := map[string]int{}
	changed := 0
	_, err := a.s.write(ctx, func(tx *txn) error {
		clear(down)
		changed = 0
		for name, v := range tx.st.Services {
			h := verdict(v, t[name])
			if h == nil {
				if _, ok := tx.st.Health[name]; ok {
					tx.removeHealth(name)
					changed++
				}
				continue
			}
			down[name] = h.DownCount()
			n := len(tx.ops)
			if err := tx.setHealth(h); err != nil {
				return err
			}
			changed += len(tx.ops) - n
		}
		for name := range tx.st.Health {
			if _, ok := tx.st.Services[name]; !ok {
				tx.removeHealth(name)
				changed++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	m := a.s.metrics
	m.backendsDown.Reset()
	for name, n := range down {
		m.backendsDown.WithLabelValues(name).Set(float64(n))
	}
	a.mu.Lock()
	m.healthReports.Set(float64(len(a.reports)))
	a.mu.Unlock()
	if changed > 0 {
		m.healthWrites.Add(float64(changed))
		a.log.Info("health verdicts written", "objects", changed, "services_with_down_backends", len(down))
	}
	return nil
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
