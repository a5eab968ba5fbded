package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// fleetAgentsPerClient: the in-process agents share etcd clients, this
// many each (every agent has its own load and watch of its host's share;
// a real agent has a client of its own).
const fleetAgentsPerClient = 25

type fleetAgent struct {
	host      int
	r         *agent.Reconciler
	rev       atomic.Int64
	at        atomic.Int64
	started   time.Time
	loadS     float64
	firstLoad chan struct{}
	once      sync.Once
}

// fleetAgentsRun starts an agent Reconciler on the data-plane fake for
// each of the hosts h0..h<agents-1>, each following its host's share
// (placement.AgentScope with FollowScopeState, as agent.Run does), and
// times their loads and the drift of rebinds between them: from
// store.Commit until the agent of the host the EIP moved to programmed it
// and the one it left dropped it.
func fleetAgentsRun(ctx context.Context, o FleetOptions, endpoints func(int) []string, region *fleetRegion, admin *store.Store, hosts int, say func(string, ...any)) ([]Result, error) {
	quiet := slog.New(slog.DiscardHandler)
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var clients []*store.Store
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	say("starting %d agents (hosts h0..h%d, %d guests each, %d per etcd client), each following its host's share", o.Agents, o.Agents-1, fleetGuestsPerHost, fleetAgentsPerClient)
	base := fleetnode.HeapInUse()
	agents := make([]*fleetAgent, o.Agents)
	sem := make(chan struct{}, 8)
	t0 := time.Now()
	for h := range agents {
		if h%fleetAgentsPerClient == 0 {
			c, err := store.Connect(store.Options{Endpoints: endpoints(h / fleetAgentsPerClient), Log: quiet})
			if err != nil {
				return nil, err
			}
			clients = append(clients, c)
		}
		st := clients[len(clients)-1]
		fa, err := newFleetAgent(h, quiet)
		if err != nil {
			return nil, err
		}
		r := fa.r
		agents[h] = fa
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		fa.started = time.Now()
		wg.Add(2)
		go func() {
			defer wg.Done()
			// agent.Run's follow (placement.AgentScope with
			// FollowScopeState).
			agent.Follow(actx, quiet, st, fmt.Sprintf("h%d", h), r)
			r.Stop()
		}()
		go func() {
			defer wg.Done()
			select {
			case <-fa.firstLoad:
			case <-actx.Done():
			}
			<-sem
		}()
	}
	var loadMax float64
	for _, fa := range agents {
		select {
		case <-fa.firstLoad:
		case <-time.After(10 * time.Minute):
			return nil, fmt.Errorf("fleet: agent h%d did not load in 10 minutes", fa.host)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		loadMax = max(loadMax, fa.loadS)
	}
	loadS := time.Since(t0).Seconds()
	// Each agent holds its host's EIPs (those bound to its guests).
	perHost := map[string]int{}
	for _, k := range region.st.Keys(model.KindEIP) {
		if o, ok := region.st.Get(model.KindEIP, k); ok {
			if b := o.(*model.EIP).Binding; b != nil {
				perHost[b.Host]++
			}
		}
	}
	for _, fa := range agents {
		want := perHost[fmt.Sprintf("h%d", fa.host)]
		if got := len(fa.r.Programmed()); got != want {
			return nil, fmt.Errorf("fleet: agent h%d programmed %d EIPs after its load, want %d", fa.host, got, want)
		}
	}
	heapMB := float64(fleetnode.HeapInUse()-base) / 1e6 / float64(o.Agents)
	say("%d agents loaded their hosts in %.1f s (one agent's full load at most %.2f s; %.2f MB of Go heap per agent, fake maps included)", o.Agents, loadS, loadMax, heapMB)

	// Drift: EIPs rebound to a guest of another agent's host.
	waitRev := func(fa *fleetAgent, rev int64, t0 time.Time) (float64, error) {
		for deadline := time.Now().Add(30 * time.Second); fa.rev.Load() < rev; time.Sleep(200 * time.Microsecond) {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("fleet: agent h%d had not applied revision %d after 30s", fa.host, rev)
			}
		}
		return float64(fa.at.Load()-t0.UnixNano()) / 1e6, nil
	}
	changes := min(o.Changes, 200)
	say("timing %d EIP rebinds between agents' hosts from store.Commit to both agents", changes)
	eipsOnAgents := min(o.EIPs, o.Agents*fleetGuestsPerHost)
	if eipsOnAgents == 0 {
		return nil, fmt.Errorf("fleet: no EIP is bound to the agents' hosts")
	}
	var drift []float64
	early := 0 // rebinds an agent reported applied before its map showed them
	for c := 0; c < changes; c++ {
		i := (c * 7919) % eipsOnAgents
		from := -1
		if cur, ok := region.st.Get(model.KindEIP, fleetAddr(i).String()); ok && cur.(*model.EIP).Binding != nil {
			fmt.Sscanf(cur.(*model.EIP).Binding.Host, "h%d", &from)
		}
		if from < 0 || from >= o.Agents {
			continue // bound to a host without an agent here
		}
		to := (from + 1 + c%(o.Agents-1)) % o.Agents
		e, err := fleetRebind(region.st, i, to)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		rev, err := region.write(ctx, admin, e)
		if err != nil {
			return nil, fmt.Errorf("fleet: rebind %v: %w", e.Address, err)
		}
		dTo, err := waitRev(agents[to], rev, t0)
		if err != nil {
			return nil, err
		}
		dFrom, err := waitRev(agents[from], rev, t0)
		if err != nil {
			return nil, err
		}
		// Bind -> programmed on the new host, dropped on the old one.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Microsecond) {
			_, on := agents[to].r.Programmed()[e.Address]
			_, left := agents[from].r.Programmed()[e.Address]
			if on && !left {
				break
			}
			if dTo >= 0 {
				early++
				dTo = -1
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("fleet: %v: programmed on h%d %v, on h%d %v, 30 s after both applied revision %d", e.Address, to, on, from, left, rev)
			}
		}
		if dTo < 0 {
			dTo = float64(time.Since(t0)) / 1e6
		}
		drift = append(drift, max(dTo, dFrom))
	}
	if len(drift) == 0 {
		return nil, fmt.Errorf("fleet: no EIP to rebind between the agents' hosts")
	}
	say("agent drift (both hosts' agents): p50 %.1f ms, p99 %.1f ms, max %.1f ms", percentile(drift, 50), percentile(drift, 99), slices.Max(drift))
	note := fmt.Sprintf("%d agent Reconcilers on fakes in the fleet process, each following its host's share, %d per etcd client; %d hosts in the region", o.Agents, fleetAgentsPerClient, hosts)
	return []Result{
		{Suite: "fleet", Name: "agents", Value: float64(o.Agents), Note: note},
		{Suite: "fleet", Name: "agents_first_load", Value: loadS, Unit: "s", Note: "every agent's full load of its host's share, 8 at a time"},
		{Suite: "fleet", Name: "agent_load_max", Value: loadMax, Unit: "s", Target: "<= 2 s", Note: "the slowest agent's full load, from its follow start"},
		{Suite: "fleet", Name: "agent_in_process_heap", Value: heapMB, Unit: "MB",
			Note: "Go heap of the agents / agents, fake maps included; not an agent's RSS (the issue's <= 32 MB), which adds a process's Go runtime and its own client"},
		{Suite: "fleet", Name: "agent_drift_p50", Value: percentile(drift, 50), Unit: "ms",
			Note: fmt.Sprintf("%d rebinds, from before store.Commit until the agents of both hosts applied it", changes)},
		{Suite: "fleet", Name: "agent_drift_p99", Value: percentile(drift, 99), Unit: "ms", Target: "<= 100 ms"},
		{Suite: "fleet", Name: "agent_drift_max", Value: slices.Max(drift), Unit: "ms"},
		{Suite: "fleet", Name: "agent_applied_early", Value: float64(early), Note: "rebinds where an agent reported the revision applied before its map showed the change (their drift is until it did)"},
	}, nil
}

// newFleetAgent is host h's agent Reconciler on a fresh fake, noting its
// applied revisions and its first load (as newFleetEdge does for an edge).
func newFleetAgent(h int, log *slog.Logger) (*fleetAgent, error) {
	fa := &fleetAgent{host: h, firstLoad: make(chan struct{})}
	r, err := agent.NewReconciler(agent.Config{NoRetry: true, Name: fmt.Sprintf("h%d", h), Underlay: "ul0", Log: log}, dataplane.NewFakeAgent(), fleetnode.Links{})
	if err != nil {
		return nil, err
	}
	fa.r = r
	r.OnApplied = func(rev int64) {
		if rev > fa.rev.Load() {
			fa.at.Store(time.Now().UnixNano())
			fa.rev.Store(rev)
		}
		fa.once.Do(func() { fa.loadS = time.Since(fa.started).Seconds(); close(fa.firstLoad) })
	}
	return fa, nil
}
