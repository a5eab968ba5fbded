package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Defaults of the agent processes and the region-wide restart.
const (
	DefaultFleetAgentProcs    = 16
	DefaultFleetRestartJitter = 10 * time.Second
	maxFleetAgentProcs        = 256
	maxFleetEdgeProcs         = 256
	maxFleetRestartJitter     = 5 * time.Minute // cmd/azgate's maxLoadJitter
)

// fleetPerHost counts the region's bound EIPs by host.
func fleetPerHost(region *fleetRegion) map[string]int {
	perHost := map[string]int{}
	for _, k := range region.st.Keys(model.KindEIP) {
		if o, ok := region.st.Get(model.KindEIP, k); ok {
			if b := o.(*model.EIP).Binding; b != nil {
				perHost[b.Host]++
			}
		}
	}
	return perHost
}

// fleetBusiestHosts are the n hosts of h0..h<hosts-1> with the most
// bound EIPs, the most first (ties by number).
func fleetBusiestHosts(perHost map[string]int, hosts, n int) []string {
	idx := make([]int, hosts)
	for h := range idx {
		idx[h] = h
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Compare(perHost[fmt.Sprintf("h%d", b)], perHost[fmt.Sprintf("h%d", a)])
	})
	out := make([]string, 0, n)
	for _, h := range idx[:min(n, hosts)] {
		out = append(out, fmt.Sprintf("h%d", h))
	}
	return out
}

// agentChildArgs are an agent child's arguments.
func agentChildArgs(endpoints []string, host string, jitter time.Duration) []string {
	return []string{fleetnode.AgentArg, "--etcd-endpoints", strings.Join(endpoints, ","), "--host", host, "--load-jitter", jitter.String()}
}

// fleetAgentProcsRun starts o.AgentProcs agent child processes for the
// hosts with the most EIPs, 8 loading at once, checks that each
// programmed its host's EIPs, and after a rest asks each for its memory.
// It stops them before it returns and returns their hosts.
func fleetAgentProcsRun(ctx context.Context, o FleetOptions, endpoints func(int) []string, region *fleetRegion, hosts int, procs *fleetProcs, say func(string, ...any)) ([]Result, []string, error) {
	perHost := fleetPerHost(region)
	names := fleetBusiestHosts(perHost, hosts, o.AgentProcs)
	say("starting %d agent processes (%s %s, each an agent Reconciler on the fakes following its host's share), the hosts with the most EIPs (%d to %d), 8 loading at once",
		len(names), o.binaryName(), fleetnode.AgentArg, perHost[names[len(names)-1]], perHost[names[0]])
	specs := make([]fleetChildSpec, len(names))
	for i, h := range names {
		specs[i] = fleetChildSpec{h, agentChildArgs(endpoints(i), h, 0)}
	}
	t0 := time.Now()
	ps, err := procs.startLoaded(ctx, o.Binary, specs, 8)
	if err != nil {
		return nil, nil, err
	}
	allS := time.Since(t0).Seconds()
	var loads, starts []float64
	for i, p := range ps {
		if want := perHost[names[i]]; p.load.EIPs != want {
			return nil, nil, fmt.Errorf("fleet: agent process %s programmed %d EIPs after its load, want %d", p.name, p.load.EIPs, want)
		}
		loads = append(loads, p.load.LoadS)
		starts = append(starts, float64(p.load.At-p.started.UnixNano())/1e9)
	}
	u, err := usageAtRest(ctx, ps, say)
	if err != nil {
		return nil, nil, err
	}
	rss, peak, rssGC, anon, file := u.rss, u.peak, u.rssGC, u.anon, u.file
	say("%d agent processes loaded in %.1f s (a load from the follow start at most %.2f s, from exec %.2f s); VmRSS at rest p50 %.1f max %.1f MB (RssAnon max %.1f MB, RssFile max %.1f MB), VmHWM max %.1f MB, after a forced GC max %.1f MB",
		len(ps), allS, maxOf(loads), maxOf(starts), percentile(rss, 50), maxOf(rss), maxOf(anon), maxOf(file), maxOf(peak), maxOf(rssGC))
	if err := procs.stopAll(); err != nil {
		return nil, nil, err
	}
	most := perHost[names[0]]
	return []Result{
		{Suite: "fleet", Name: "agent_procs", Value: float64(len(ps)),
			Note: fmt.Sprintf("agent child processes (%s %s): each one agent Reconciler on the fakes following its host's share with agent.Follow (the role's), its own etcd client; hosts with the most EIPs (%d to %d of 1,000 guests)",
				o.binaryName(), fleetnode.AgentArg, perHost[names[len(names)-1]], most)},
		{Suite: "fleet", Name: "agent_proc_load_max", Value: maxOf(loads), Unit: "s", Target: "<= 2 s", Note: "the slowest agent process's full load, from its follow start to its first applied revision, 8 loading at once"},
		{Suite: "fleet", Name: "agent_proc_start_to_load_max", Value: maxOf(starts), Unit: "s", Note: "from the bench's exec of the child to its first applied revision (process start, client, load)"},
		{Suite: "fleet", Name: "agent_rss_max", Value: maxOf(rss), Unit: "MB", Target: "<= 32 MB",
			Note: fmt.Sprintf("VmRSS at rest (2 s after every agent process loaded), the largest; agents of hosts with up to %d EIPs, fake maps included", most)},
		{Suite: "fleet", Name: "agent_peak_rss_max", Value: maxOf(peak), Unit: "MB", Target: "<= 32 MB", Note: "VmHWM (its load included), the largest"},
		{Suite: "fleet", Name: "agent_rss_anon_max", Value: maxOf(anon), Unit: "MB",
			Note: "RssAnon at rest, the largest: the process's own memory (Go heap, stacks, runtime, fake maps)"},
		{Suite: "fleet", Name: "agent_rss_file_max", Value: maxOf(file), Unit: "MB",
			Note: fmt.Sprintf("RssFile at rest, the largest: the child executable's pages mapped (%s: the node roles' code and the fakes; shared page cache, reclaimable)", o.binaryName())},
		{Suite: "fleet", Name: "agent_rss_gc_max", Value: maxOf(rssGC), Unit: "MB", Note: "VmRSS after a forced GC and debug.FreeOSMemory, the largest"},
	}, names, nil
}

// binaryName is the child's executable as printed.
func (o FleetOptions) binaryName() string {
	if o.Binary != "" {
		return o.Binary
	}
	return fleetnode.BinaryName
}

// restartNode is a node of the restart: its last applied revision and
// when (unix ns).
type restartNode struct {
	kind, name string
	rev        func() (int64, int64)
}

// fleetRestartRun is the region-wide restart: with every node stopped,
// it starts them all at once, each with o.RestartJitter as its store's
// LoadJitter (the roles' --etcd-load-jitter): o.Sets' edges (the first
// o.EdgeProcs as edge processes, the others in this process on fresh
// fakes), o.Agents agents in this process, and an agent process for each
// of procHosts; and times until every one applied the region's current
// revision and checks what each then holds.
func fleetRestartRun(ctx context.Context, o FleetOptions, endpoints func(int) []string, region *fleetRegion, setEIPs []int, hosts int, procHosts []string, procs *fleetProcs, say func(string, ...any)) ([]Result, error) {
	quiet := slog.New(slog.DiscardHandler)
	perHost := fleetPerHost(region)
	target := region.rev
	w := o.RestartJitter
	n := o.edges()
	say("region-wide restart: %d edges (%d of them processes), %d agents in this process and %d agent processes, all started at once, each waiting a random share of %v before its full load (store.Options.LoadJitter, --etcd-load-jitter)",
		n, o.EdgeProcs, o.Agents, len(procHosts), w)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, n+o.Agents+len(procHosts))
	var nodes []restartNode
	var edges []*fleetEdge
	var agents []*fleetAgent
	var clients []*store.Store
	var mu sync.Mutex // clients
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clients {
			c.Close()
		}
	}()
	connect := func(k int) (*store.Store, error) {
		c, err := store.Connect(store.Options{Endpoints: endpoints(k), Log: quiet, LoadJitter: w})
		if err == nil {
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
		}
		return c, err
	}
	t0 := time.Now()
	var ps []*fleetProc
	for s := 0; s < o.Sets; s++ {
		for e := 0; e < o.edgesOf(s); e++ {
			name := fmt.Sprintf("s%d-e%d", s, e)
			k := len(edges)
			if k < o.EdgeProcs {
				p, err := procs.start(ctx, o.Binary, name, edgeChildArgs(endpoints(k), name, w, "")...)
				if err != nil {
					return nil, err
				}
				ps = append(ps, p)
				edges = append(edges, &fleetEdge{name: name, set: s, proc: p})
				nodes = append(nodes, restartNode{"edge process", name, func() (int64, int64) { return p.rev.Load(), p.at.Load() }})
				continue
			}
			fe := newFleetEdge(name, s)
			edges = append(edges, fe)
			nodes = append(nodes, restartNode{"edge", fe.name, func() (int64, int64) { return fe.rev.Load(), fe.at.Load() }})
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := connect(k)
				if err != nil {
					errc <- err
					return
				}
				edge.FollowShare(rctx, st, fe.name, fe.r, quiet)
			}()
		}
	}
	for g := 0; g*fleetAgentsPerClient < o.Agents; g++ {
		var group []*fleetAgent
		for h := g * fleetAgentsPerClient; h < min((g+1)*fleetAgentsPerClient, o.Agents); h++ {
			fa, err := newFleetAgent(h, quiet)
			if err != nil {
				return nil, err
			}
			group = append(group, fa)
			agents = append(agents, fa)
			nodes = append(nodes, restartNode{"agent", fmt.Sprintf("h%d", h), func() (int64, int64) { return fa.rev.Load(), fa.at.Load() }})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := connect(g)
			if err != nil {
				errc <- err
				return
			}
			var fw sync.WaitGroup
			for _, fa := range group {
				fw.Add(1)
				go func() {
					defer fw.Done()
					agent.Follow(rctx, quiet, st, fmt.Sprintf("h%d", fa.host), fa.r)
					fa.r.Stop()
				}()
			}
			fw.Wait()
		}()
	}
	for i, h := range procHosts {
		p, err := procs.start(ctx, o.Binary, h, agentChildArgs(endpoints(i), h, w)...)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
		nodes = append(nodes, restartNode{"agent process", h, func() (int64, int64) { return p.rev.Load(), p.at.Load() }})
	}

	// Until every node applied the current revision.
	serving := make([]float64, len(nodes))
	left := len(nodes)
	limit := w + 10*time.Minute
	for deadline := time.Now().Add(limit); left > 0; time.Sleep(5 * time.Millisecond) {
		for i, nd := range nodes {
			if serving[i] == 0 {
				if rev, at := nd.rev(); rev >= target {
					serving[i] = max(float64(at-t0.UnixNano())/1e9, 1e-9)
					left--
				}
			}
		}
		select {
		case err := <-errc:
			return nil, fmt.Errorf("fleet: restart: %w", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		for _, p := range ps {
			select {
			case <-p.done:
				return nil, p.failed()
			default:
			}
		}
		if left > 0 && time.Now().After(deadline) {
			i := slices.Index(serving, 0)
			return nil, fmt.Errorf("fleet: restart: %d of %d nodes had not applied revision %d %v after the start (%s %s)", left, len(nodes), target, limit, nodes[i].kind, nodes[i].name)
		}
	}
	allS := maxOf(serving)
	// What each then holds.
	for _, fe := range edges {
		if fe.proc != nil {
			if err := fe.proc.waitLoaded(ctx, 10*time.Second); err != nil {
				return nil, err
			}
		}
		if got := fe.held(); got != setEIPs[fe.set] {
			return nil, fmt.Errorf("fleet: restart: edge %s holds %d routes, want its set's %d", fe.name, got, setEIPs[fe.set])
		}
	}
	for _, fa := range agents {
		if got, want := len(fa.r.Programmed()), perHost[fmt.Sprintf("h%d", fa.host)]; got != want {
			return nil, fmt.Errorf("fleet: restart: agent h%d programmed %d EIPs, want %d", fa.host, got, want)
		}
	}
	for _, p := range ps[o.EdgeProcs:] {
		if err := p.waitLoaded(ctx, 10*time.Second); err != nil {
			return nil, err
		}
		if want := perHost[p.name]; p.load.EIPs != want {
			return nil, fmt.Errorf("fleet: restart: agent process %s programmed %d EIPs, want %d", p.name, p.load.EIPs, want)
		}
	}
	byKind := func(kind string) float64 {
		m := 0.0
		for i, nd := range nodes {
			if nd.kind == kind {
				m = max(m, serving[i])
			}
		}
		return m
	}
	edgesS := max(byKind("edge"), byKind("edge process"))
	say("region-wide restart of %d nodes (jitter %v): every node serving again after %.1f s (p50 %.1f s; edges %.1f s (edge processes %.1f s), agents %.1f s, agent processes %.1f s)",
		len(nodes), w, allS, percentile(serving, 50), edgesS, byKind("edge process"), byKind("agent"), byKind("agent process"))
	cancel()
	wg.Wait()
	if err := procs.stopAll(); err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%d nodes (%d edges, %d of them processes, the others and %d agents in this process on fresh fakes, %d agent processes) started at once, each full load after a random wait in [0, %v) (store.Options.LoadJitter, the roles' --etcd-load-jitter), until the last applied the region's current revision",
		len(nodes), n, o.EdgeProcs, o.Agents, len(procHosts), w)
	return []Result{
		{Suite: "fleet", Name: "region_restart_nodes", Value: float64(len(nodes)), Note: note},
		{Suite: "fleet", Name: "region_restart_jitter", Value: w.Seconds(), Unit: "s"},
		{Suite: "fleet", Name: "region_restart_all_serving_s", Value: allS, Unit: "s", Target: "<= 60 s", Note: note},
		{Suite: "fleet", Name: "region_restart_serving_p50_s", Value: percentile(serving, 50), Unit: "s"},
		{Suite: "fleet", Name: "region_restart_edges_serving_max_s", Value: edgesS, Unit: "s"},
		{Suite: "fleet", Name: "region_restart_edge_procs_serving_max_s", Value: byKind("edge process"), Unit: "s"},
		{Suite: "fleet", Name: "region_restart_agents_serving_max_s", Value: byKind("agent"), Unit: "s"},
		{Suite: "fleet", Name: "region_restart_agent_procs_serving_max_s", Value: byKind("agent process"), Unit: "s"},
	}, nil
}
