package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// FleetOptions size the fleet control-plane benchmark (issue 8, "Fleet
// control plane"; issue 19, "The fleet bench at region scale"): Sets x
// EdgesPerSet edge Reconcilers on the data-plane fakes, in this process,
// each with its own etcd client and watch following its set's share of
// the store (edge.FollowShare), on a 3-member etcd cluster on this
// machine, with EIPs bound EIPs in the region, spread over the sets.
type FleetOptions struct {
	Sets, EdgesPerSet int
	// FullSets: the first FullSets of the sets have model.MaxSetEdges
	// edges, the others EdgesPerSet (issue 19's shape: a full set of 32
	// among small ones).
	FullSets int
	// EIPs: bound EIPs in the region. EIP i is in the /18 i mod 256 of
	// 100.64.0.0/10 and set s holds the /18s j with j mod Sets = s, so
	// each set holds about EIPs/Sets of them.
	EIPs           int
	Changes        int // EIP rebinds timed (drift, over the edges of the EIP's set)
	ServiceChanges int // service backend changes timed (agreement, every set's service at once)
	// RSSEIPs: then one edge of set0 alone, in a child process, follows
	// its set's share until it holds this many EIPs (the region grows
	// until set0 holds them, the other sets about Sets-1 times as many)
	// and reports its RSS (0: skip).
	RSSEIPs int
	// Agents > 1: then that many agent Reconcilers (hosts h0..), in this
	// process on the fakes, each following its host's share; their loads
	// and the drift of rebinds between their hosts are timed.
	Agents int
	// AgentProcs > 0: then that many agent child processes (`azgate-fleetnode
	// fleet-agent`), one agent each for the hosts with the
	// most EIPs, report their loads and their RSS at rest and at peak.
	AgentProcs int
	// EdgeProcs > 0: the first EdgeProcs edges (in set order: set0's,
	// then set1's, ...) run each as a child process (`azgate-fleetnode
	// fleet-edge`: an edge Reconciler on the fakes following its
	// set's share with edge.FollowShare), the others in this process;
	// drift, agreement and loads are timed alike, and each edge process
	// reports its RSS at rest and at peak.
	EdgeProcs int
	// Restart: then every node (the edges, in this process or not, the
	// Agents and the AgentProcs) is started again at once, each waiting a random share
	// of RestartJitter before its full load (store.Options.LoadJitter,
	// the roles' --etcd-load-jitter), and timed until all serve the
	// current revision.
	Restart       bool
	RestartJitter time.Duration
	Members       int // etcd members (3)
	// Proxies > 0 puts that many etcd gRPC proxies in front of the
	// members (issue 19, part 2): the edges point at them, round-robin,
	// one each; the writer and the one-edge child stay on the members.
	Proxies int
	// Binary is the child processes' executable (edges, agents, the one
	// edge): azgate-fleetnode, the node roles' code on the fakes
	// (default: beside this executable, where make build puts it).
	Binary string
	// EdgeProfile: the one-edge child writes a Go CPU profile of its load
	// to EdgeProfile+".cpu" and a heap profile after it to
	// EdgeProfile+".heap" ("": none).
	EdgeProfile string
	// RSSRuns: the one-edge child runs this many times on the same
	// region; its figures are the medians (0: once).
	RSSRuns int
	Out     func(format string, a ...any)
}

// Defaults: the whole fleet shape of the issue (10 x 32 edges) at a
// size that runs in a couple of minutes on a 2-core machine.
const (
	DefaultFleetSets        = 10
	DefaultFleetEdgesPerSet = 32
	DefaultFleetEIPs        = 10_000
	DefaultFleetRSSEIPs     = 100_000
)

// fleetEdge is one edge of the fleet.
type fleetEdge struct {
	name      string
	set       int
	started   time.Time // its follow started
	loadS     float64   // from started to its first applied revision
	st        *store.Store
	fake      *dataplane.FakeLB
	r         *edge.Reconciler
	rev       atomic.Int64   // last applied revision
	at        atomic.Int64   // unix ns when rev was first applied
	seen      fleetnode.Seen // the last revision the watch delivered and when
	firstLoad chan struct{}
	once      sync.Once
	// proc: the edge is a child process (st, fake and r are nil; its
	// load is proc.load).
	proc *fleetProc
}

// fleetUnits: the region's addresses are the 256 /18s of 100.64.0.0/10
// (no documentation or benchmarking range holds a million addresses;
// these exist only as keys in fake maps, no packet is ever sent); a set
// holds whole /18s, so there are at most this many sets.
const fleetUnits = 256

// fleetUnit is /18 j: 100.(64 + j/4).(j%4 * 64).0/18.
func fleetUnit(j int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + j/4), byte(j % 4 * 64), 0}), 18)
}

// fleetAddr is EIP i: address i/256 of /18 i mod 256.
func fleetAddr(i int) netip.Addr {
	j, n := i%fleetUnits, i/fleetUnits
	b := fleetUnit(j).Addr().As4()
	b[2] += byte(n >> 8)
	b[3] = byte(n)
	return netip.AddrFrom4(b)
}

const fleetGuestsPerHost = 1000

func fleetHosts(eips int) int { return max((eips+fleetGuestsPerHost-1)/fleetGuestsPerHost, 8) }

// fleetUnderlay is host h's underlay address.
func fleetUnderlay(h int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)}) }

func fleetHost(h int) *model.Host {
	host := &model.Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: fleetUnderlay(h)}
	for g := 0; g < fleetGuestsPerHost; g++ {
		host.Guests = append(host.Guests, model.Guest{Name: fmt.Sprintf("g%d", g),
			Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(model.VSIDMin + g)})
	}
	for g := 0; g < fleetSpareGuests; g++ {
		host.Guests = append(host.Guests, model.Guest{Name: fmt.Sprintf("s%d", g),
			Address: netip.AddrFrom4([4]byte{198, 19, 4, byte(g)}), VSID: uint32(model.VSIDMin + fleetGuestsPerHost + g)})
	}
	return host
}

// fleetSpareGuests are guests of each host no EIP is bound to at first:
// a rebind moves an EIP to a free one (one EIP per guest, as the
// controller enforces; the bench writes the state without its checks).
const fleetSpareGuests = 64

func fleetEIP(i, host int) *model.EIP {
	return &model.EIP{Address: fleetAddr(i), Binding: &model.Binding{Host: fmt.Sprintf("h%d", host), Guest: fmt.Sprintf("g%d", i%fleetGuestsPerHost)}}
}

// fleetRebind is EIP i bound to a spare guest of host that no EIP of st
// is bound to.
func fleetRebind(st *model.State, i, host int) (*model.EIP, error) {
	name := fmt.Sprintf("h%d", host)
	for g := range fleetSpareGuests {
		guest := fmt.Sprintf("s%d", g)
		if _, taken := st.BoundEIP(name, guest); !taken {
			return &model.EIP{Address: fleetAddr(i), Binding: &model.Binding{Host: name, Guest: guest}}, nil
		}
	}
	return nil, fmt.Errorf("fleet: every spare guest of %s is bound", name)
}

// fleetMaxEIPs: EIP i is address i/256 of its /18; the last two of each
// /18 are left for the services' VIPs.
const fleetMaxEIPs = fleetUnits * 16382

// fleetMaxSets: a set's edges' underlays are 198.18.(128+s).0/24, past
// the hosts'.
const fleetMaxSets = 128

// fleetSetOf is the set (of sets) that holds EIP i (see fleetSets).
func fleetSetOf(i, sets int) int { return i % fleetUnits % sets }

// fleetVIP is set s's service VIP: in the set's first /18 (/18 s), past
// every EIP.
func fleetVIP(s int) netip.Addr {
	b := fleetUnit(s).Addr().As4()
	b[2] += 63
	b[3] = 254
	return netip.AddrFrom4(b)
}

// fleetServiceName is set s's service (each set carries its own: since
// issue 17 an edge builds the tables of the services whose VIP its set
// may carry, setplan.Carriers).
func fleetServiceName(s int) string { return fmt.Sprintf("web%d", s) }

func fleetService(set, backends, without int) *model.Service {
	var bs []model.Backend
	for h := 0; h < backends; h++ {
		if h != without {
			bs = append(bs, model.Backend{Host: fmt.Sprintf("h%d", h), Guest: "g0"})
		}
	}
	return &model.Service{Name: fleetServiceName(set), VIP: fleetVIP(set), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: bs}}}
}

// edgesOf is how many edges set s has.
func (o FleetOptions) edgesOf(s int) int {
	if s < o.FullSets {
		return model.MaxSetEdges
	}
	return o.EdgesPerSet
}

// edges is how many edges the fleet has.
func (o FleetOptions) edges() int {
	n := 0
	for s := 0; s < o.Sets; s++ {
		n += o.edgesOf(s)
	}
	return n
}

func fleetSets(sets, edgesPerSet int) []*model.EdgeSet {
	return FleetOptions{Sets: sets, EdgesPerSet: edgesPerSet}.sets()
}

func (o FleetOptions) sets() []*model.EdgeSet {
	sets := o.Sets
	var out []*model.EdgeSet
	for s := 0; s < sets; s++ {
		set := &model.EdgeSet{Name: fmt.Sprintf("set%d", s)}
		for j := s; j < fleetUnits; j += sets {
			set.Prefixes = append(set.Prefixes, fleetUnit(j))
		}
		for e := 0; e < o.edgesOf(s); e++ {
			set.Edges = append(set.Edges, model.EdgeNode{Name: fmt.Sprintf("s%d-e%d", s, e),
				Underlay: netip.AddrFrom4([4]byte{198, 18, byte(128 + s), byte(e + 1)})})
		}
		out = append(out, set)
	}
	return out
}

func ops(objs ...model.Object) []store.Op {
	out := make([]store.Op, 0, len(objs))
	for _, o := range objs {
		b, _ := store.Encode(o)
		out = append(out, store.Op{Kind: model.KindOf(o), Key: o.Key(), Value: b})
	}
	return out
}

// commitAt commits ops at the current commit revision.
func commitAt(ctx context.Context, s *store.Store, o []store.Op) (int64, error) {
	rev, err := s.CommitRevision(ctx)
	if err != nil {
		return 0, err
	}
	return s.Commit(ctx, rev, o)
}

// fleetRegion is the bench's desired state: it writes the region and each
// change as the controller does, with the copies of the partitioned
// layout (store/scope.go) in the same commit: placement.AllOps for the
// whole region, placement.Take and Diff for a change.
type fleetRegion struct {
	st  *model.State
	rev int64 // the last commit's
}

// writeAll writes objs (the whole region) with every copy, and the layout
// marker.
func (g *fleetRegion) writeAll(ctx context.Context, s *store.Store, objs []model.Object) (int64, error) {
	g.st = model.NewState()
	for _, o := range objs {
		g.st.Set(o)
	}
	cp, err := placement.AllOps(g.st)
	if err != nil {
		return 0, err
	}
	rev, err := commitAt(ctx, s, append(cp, ops(objs...)...))
	if err != nil {
		return 0, err
	}
	g.rev = rev
	if err := s.MarkLayout(ctx); err != nil {
		return 0, err
	}
	return rev, nil
}

// write commits a change of objs: the copies put, the objects, the copies
// deleted (placement.Diff's order).
func (g *fleetRegion) write(ctx context.Context, s *store.Store, objs ...model.Object) (int64, error) {
	changed := make([]placement.Ref, len(objs))
	for i, o := range objs {
		changed[i] = placement.Ref{Kind: model.KindOf(o), Key: o.Key()}
	}
	// As the controller: the objects related after the change are taken
	// before it too (placement.Related), so copies they already have are
	// not written again.
	type prev struct {
		o   model.Object
		had bool
	}
	olds := make([]prev, len(objs))
	for i, o := range objs {
		olds[i].o, olds[i].had = g.st.Get(changed[i].Kind, changed[i].Key)
		g.st.Set(o)
	}
	related := placement.Related(g.st, changed)
	for i := len(objs) - 1; i >= 0; i-- {
		if olds[i].had {
			g.st.Set(olds[i].o)
		} else {
			g.st.Remove(changed[i].Kind, changed[i].Key)
		}
	}
	before, err := placement.Take(g.st, changed, related)
	if err != nil {
		return 0, err
	}
	for _, o := range objs {
		g.st.Set(o)
	}
	after, err := placement.Take(g.st, changed, before)
	if err != nil {
		return 0, err
	}
	cp := placement.Diff(before, after, changed)
	i := slices.IndexFunc(cp, func(o store.Op) bool { return o.Value == nil })
	if i < 0 {
		i = len(cp)
	}
	all := append(append(slices.Clip(cp[:i]), ops(objs...)...), cp[i:]...)
	// As the controller commits a change: at the revision of the state it
	// was planned on (g.rev, the bench's last commit), without reading the
	// store's commit revision first (commitAt's read is a linearizable
	// Get, a quorum round trip that the timed drift then counted and the
	// controller does not make). A conflict (a commit the bench did not
	// make) reads the current revision and tries once more.
	rev, err := s.Commit(ctx, g.rev, all)
	if errors.Is(err, store.ErrConflict) {
		rev, err = commitAt(ctx, s, all)
	}
	if err == nil {
		g.rev = rev
	}
	return rev, err
}

// shape is "10 sets of 4 edges" or "1 of 32 edges and 10 of 4".
func (o FleetOptions) shape() string {
	if o.FullSets == 0 || o.EdgesPerSet == model.MaxSetEdges {
		return fmt.Sprintf("%d sets of %d edges", o.Sets, o.EdgesPerSet)
	}
	if o.FullSets == o.Sets {
		return fmt.Sprintf("%d sets of %d edges", o.Sets, model.MaxSetEdges)
	}
	return fmt.Sprintf("%d of %d edges and %d of %d", o.FullSets, model.MaxSetEdges, o.Sets-o.FullSets, o.EdgesPerSet)
}

// Check refuses a shape the benchmark cannot run (a set of more than
// model.MaxSetEdges edges is invalid: its edges would never load).
func (o FleetOptions) Check() error {
	if o.Sets <= 0 || o.EdgesPerSet <= 0 || o.Sets > fleetMaxSets || o.EdgesPerSet > model.MaxSetEdges {
		return fmt.Errorf("fleet: %d sets of %d edges: want 1-%d sets of 1-%d edges (model.MaxSetEdges)", o.Sets, o.EdgesPerSet, fleetMaxSets, model.MaxSetEdges)
	}
	if o.FullSets < 0 || o.FullSets > o.Sets {
		return fmt.Errorf("fleet: %d full sets of %d sets", o.FullSets, o.Sets)
	}
	if o.EIPs <= 0 || o.EIPs > fleetMaxEIPs {
		return fmt.Errorf("fleet: %d EIPs: want 1 to %d", o.EIPs, fleetMaxEIPs)
	}
	if o.Agents < 0 || o.Agents == 1 || o.Agents > 65536 {
		return fmt.Errorf("fleet: %d agents: want 0 or 2 to 65536", o.Agents)
	}
	if o.EdgeProcs < 0 || o.EdgeProcs > o.edges() || o.EdgeProcs > maxFleetEdgeProcs {
		return fmt.Errorf("fleet: %d edge processes: want 0 to %d, and at most the fleet's %d edges", o.EdgeProcs, maxFleetEdgeProcs, o.edges())
	}
	if o.AgentProcs < 0 || o.AgentProcs > maxFleetAgentProcs || o.AgentProcs > max(fleetHosts(o.EIPs), o.Agents) {
		return fmt.Errorf("fleet: %d agent processes: want 0 to %d, and at most one a host (%d hosts)", o.AgentProcs, maxFleetAgentProcs, max(fleetHosts(o.EIPs), o.Agents))
	}
	if o.RestartJitter < 0 || o.RestartJitter > maxFleetRestartJitter {
		return fmt.Errorf("fleet: restart jitter %v: want 0 to %v", o.RestartJitter, maxFleetRestartJitter)
	}
	if o.RSSEIPs < 0 || fleetRegionFor(o.RSSEIPs, o.Sets) > fleetMaxEIPs {
		return fmt.Errorf("fleet: %d EIPs in set0 of %d sets: the region would need more than %d", o.RSSEIPs, o.Sets, fleetMaxEIPs)
	}
	return nil
}

// fleetInSet counts the EIPs of set s among the region's first n.
func fleetInSet(n, s, sets int) int {
	c := 0
	for j := 0; j < fleetUnits; j++ {
		if j%sets == s && n > j {
			c += (n - j + fleetUnits - 1) / fleetUnits
		}
	}
	return c
}

// fleetRegionFor is the smallest region (EIPs 0..n-1) whose set0 holds
// want EIPs.
func fleetRegionFor(want, sets int) int {
	lo, hi := 0, fleetUnits*16384
	for lo < hi {
		m := (lo + hi) / 2
		if fleetInSet(m, 0, sets) >= want {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// FleetControl runs the benchmark. See FleetOptions and docs/scale.md.
func FleetControl(ctx context.Context, o FleetOptions) ([]Result, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.EdgeProcs > 0 || o.AgentProcs > 0 || o.RSSEIPs > 0 {
		bin, err := fleetBinary(o.Binary)
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	if o.Changes <= 0 {
		o.Changes = 200
	}
	if o.ServiceChanges <= 0 {
		o.ServiceChanges = 20
	}
	if o.Members <= 0 {
		o.Members = 3
	}
	if o.Proxies < 0 || o.Proxies > etcdproc.MaxProxies {
		return nil, fmt.Errorf("fleet: %d proxies: want 0 to %d", o.Proxies, etcdproc.MaxProxies)
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "azfleet")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	say("starting %d etcd members (unix sockets in %s)", o.Members, dir)
	cl, err := etcdproc.Start(etcdproc.Config{Dir: dir, Members: o.Members, MaxTxnOps: 1024,
		Extra: []string{"--quota-backend-bytes", strconv.Itoa(8 << 30)}})
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	admin, err := store.Connect(store.Options{Endpoints: cl.Endpoints(), TxnOps: 1024, Log: quiet})
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	// Every child process the bench starts is killed on the way out,
	// before the cluster stops.
	procs := &fleetProcs{}
	defer procs.killAll()
	for deadline := time.Now().Add(30 * time.Second); admin.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("fleet: the etcd cluster elected no leader in 30s (logs in %s)", dir)
		}
	}
	edgeEndpoints := func(k int) []string { return cl.Endpoints() }
	if o.Proxies > 0 {
		say("starting %d etcd gRPC proxies; the edges point at them round-robin", o.Proxies)
		if err := cl.StartProxies(o.Proxies); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		edgeEndpoints = func(k int) []string { return []string{cl.Proxies[k%o.Proxies].ClientURL} }
	}

	// The region.
	hosts := max(fleetHosts(o.EIPs), o.Agents)
	var objs []model.Object
	objs = append(objs, &model.AZ{Name: "az1"})
	for h := 0; h < hosts; h++ {
		objs = append(objs, fleetHost(h))
	}
	for _, s := range o.sets() {
		objs = append(objs, s)
	}
	for s := 0; s < o.Sets; s++ {
		objs = append(objs, fleetService(s, 8, -1))
	}
	for i := 0; i < o.EIPs; i++ {
		objs = append(objs, fleetEIP(i, i/fleetGuestsPerHost))
	}
	setEIPs := make([]int, o.Sets)
	for s := range setEIPs {
		setEIPs[s] = fleetInSet(o.EIPs, s, o.Sets)
	}
	say("writing %d hosts of %d guests, %s, a service per set and %d bound EIPs (%d to %d per set), with their scope copies",
		hosts, fleetGuestsPerHost, o.shape(), o.EIPs, slices.Min(setEIPs), slices.Max(setEIPs))
	t0 := time.Now()
	var region fleetRegion
	if _, err := region.writeAll(ctx, admin, objs); err != nil {
		return nil, fmt.Errorf("fleet: write the region: %w", err)
	}
	objs = nil
	writeS := time.Since(t0).Seconds()

	// The edges, loading a few at a time (each full load is a range of
	// every key; all at once they would only queue in etcd): the first
	// o.EdgeProcs as child processes, then the others in this process.
	n := o.edges()
	inProc := n - o.EdgeProcs
	say("starting %d edges (%d as child processes, %s %s; %d in this process; each its own client, following its set's share) and waiting for their first load",
		n, o.EdgeProcs, o.binaryName(), fleetnode.EdgeArg, inProc)
	ectx, ecancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { ecancel(); wg.Wait() }()
	base := fleetnode.HeapInUse()
	edges := make([]*fleetEdge, 0, n)
	var specs []fleetChildSpec
	for s := 0; s < o.Sets; s++ {
		for e := 0; e < o.edgesOf(s); e++ {
			name := fmt.Sprintf("s%d-e%d", s, e)
			if len(edges) < o.EdgeProcs {
				specs = append(specs, fleetChildSpec{name, edgeChildArgs(edgeEndpoints(len(edges)), name, 0, "")})
				edges = append(edges, &fleetEdge{name: name, set: s})
			} else {
				edges = append(edges, newFleetEdge(name, s))
			}
		}
	}
	t1 := time.Now()
	ps, err := procs.startLoaded(ctx, o.Binary, specs, 8)
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		edges[i].proc, edges[i].loadS = p, p.load.LoadS
	}
	sem := make(chan struct{}, 8)
	for k, fe := range edges[len(ps):] {
		fe.st, err = store.Connect(store.Options{Endpoints: edgeEndpoints(len(ps) + k), Log: quiet})
		if err != nil {
			return nil, err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wg.Add(2)
		// Its set's share, as edge.Run follows it.
		fe.started = time.Now()
		go func() {
			defer wg.Done()
			edge.FollowShare(ectx, fe.st, fe.name, fleetnode.Tap{Reconciler: fe.r, Seen: &fe.seen}, quiet)
			fe.st.Close()
		}()
		go func() {
			defer wg.Done()
			select {
			case <-fe.firstLoad:
			case <-ectx.Done():
			}
			<-sem
		}()
	}
	for _, fe := range edges[len(ps):] {
		select {
		case <-fe.firstLoad:
		case <-time.After(10 * time.Minute):
			return nil, fmt.Errorf("fleet: edge %s did not load in 10 minutes", fe.name)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	loadS := time.Since(t1).Seconds()
	var edgeLoadMax, procLoadMax float64
	var procSets []int // the EIPs of the edge processes' sets
	bySet := make([][]*fleetEdge, o.Sets)
	for _, fe := range edges {
		if got := fe.held(); got != setEIPs[fe.set] {
			return nil, fmt.Errorf("fleet: edge %s holds %d routes after its load, want its set's %d", fe.name, got, setEIPs[fe.set])
		}
		edgeLoadMax = max(edgeLoadMax, fe.loadS)
		if fe.proc != nil {
			procLoadMax = max(procLoadMax, fe.loadS)
			procSets = append(procSets, setEIPs[fe.set])
		}
		bySet[fe.set] = append(bySet[fe.set], fe)
	}
	var inProcMB float64
	if inProc > 0 {
		inProcMB = float64(fleetnode.HeapInUse()-base) / 1e6 / float64(inProc)
	}
	say("%d edges loaded their sets' %d to %d EIPs in %.1f s (one edge's full load at most %.2f s, of an edge process %.2f s; %.1f MB of Go heap per edge in this process, fake maps included)",
		n, slices.Min(setEIPs), slices.Max(setEIPs), loadS, edgeLoadMax, procLoadMax, inProcMB)
	var procUsage fleetProcUsage
	if len(ps) > 0 {
		if procUsage, err = usageAtRest(ctx, ps, say); err != nil {
			return nil, err
		}
		say("%d edge processes (%s) at rest: VmRSS p50 %.1f max %.1f MB (RssAnon p50 %.1f max %.1f MB, RssFile max %.1f MB), VmHWM max %.1f MB, after a forced GC max %.1f MB",
			len(ps), o.binaryName(), percentile(procUsage.rss, 50), maxOf(procUsage.rss), percentile(procUsage.anon, 50), maxOf(procUsage.anon), maxOf(procUsage.file), maxOf(procUsage.peak), maxOf(procUsage.rssGC))
	}

	usage := func() (cpu time.Duration, rss, peak float64) {
		for i := range cl.Members {
			u, err := cl.Usage(i)
			if err == nil {
				cpu += u.CPU
				rss = max(rss, u.RSSMB)
				peak = max(peak, u.PeakMB)
			}
		}
		return
	}
	// The edges' CPU: this process's and the edge processes'.
	edgesCPU := func() time.Duration {
		u, _ := etcdproc.ProcUsage(os.Getpid())
		cpu := u.CPU
		for _, p := range ps {
			if u, err := etcdproc.ProcUsage(p.cmd.Process.Pid); err == nil {
				cpu += u.CPU
			}
		}
		return cpu
	}

	// The members' gRPC bytes to their clients (etcd's own counter) and
	// the proxies' CPU, around the rebinds.
	sentBytes := func() (float64, error) {
		var sum float64
		for i := range cl.Members {
			v, err := cl.Metric(i, "etcd_network_client_grpc_sent_bytes_total")
			if err != nil {
				return 0, fmt.Errorf("fleet: %w", err)
			}
			sum += v
		}
		return sum, nil
	}
	proxyCPU := func() (cpu time.Duration) {
		for i := range cl.Proxies {
			if u, err := cl.ProxyUsage(i); err == nil {
				cpu += u.CPU
			}
		}
		return
	}

	// Drift: EIP rebinds, one at a time, each to a guest of another host.
	say("timing %d EIP rebinds from store.Commit to every edge of the EIP's set", o.Changes)
	sent0, err := sentBytes()
	if err != nil {
		return nil, err
	}
	pcpu0 := proxyCPU()
	cpu0, _, _ := usage()
	self0 := edgesCPU()
	d0 := time.Now()
	var worst, perEdge, calls, delivered []float64
	var early, earlyTables int // edges that reported a revision applied before its change arrived
	for c := 0; c < o.Changes; c++ {
		i := (c * 7919) % o.EIPs
		to := (i/fleetGuestsPerHost + 1 + c%2) % hosts
		e, err := fleetRebind(region.st, i, to)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		rev, err := region.write(ctx, admin, e)
		if err != nil {
			return nil, fmt.Errorf("fleet: rebind %v: %w", e.Address, err)
		}
		calls = append(calls, float64(time.Since(t0))/1e6)
		// Every edge holds the new route: bind -> programmed.
		want := fleetnode.Cond{Kind: "route", Addr: e.Address, Host: fleetUnderlay(to)}
		aw, err := awaitEdges(ctx, bySet[fleetSetOf(i, o.Sets)], rev, t0, func(*fleetEdge) fleetnode.Cond { return want })
		if err != nil {
			return nil, fmt.Errorf("fleet: rebind of %v to host %v at revision %d: %w", e.Address, want.Host, rev, err)
		}
		early += aw.early
		worst = append(worst, maxOf(aw.ds))
		delivered = append(delivered, aw.delivered)
		perEdge = append(perEdge, aw.ds...)
	}
	driftS := time.Since(d0).Seconds()
	if early > 0 {
		say("%d times an edge reported a rebind's revision applied before its route changed (store.markerWait); those drifts are until the route was seen", early)
	}
	cpu1, _, _ := usage()
	pcpu1 := proxyCPU()
	sent1, err := sentBytes()
	if err != nil {
		return nil, err
	}
	self1 := edgesCPU()
	// Every edge followed the rebinds' revisions (a scope's revision
	// follows every commit of the region); none outside the EIPs' sets
	// holds one of them.
	if _, err := awaitEdges(ctx, edges, region.rev, time.Now(), func(fe *fleetEdge) fleetnode.Cond {
		return fleetnode.Cond{Kind: "routes", N: setEIPs[fe.set]}
	}); err != nil {
		return nil, fmt.Errorf("fleet: after the rebinds, every edge holds its set's EIPs: %w", err)
	}
	// Per 1,000 changes/s, scaled linearly from the rebinds (each its own
	// commit, one at a time): CPU-seconds per change x 1,000 = cores.
	perK := 1000 / float64(o.Changes)
	membersCores := (cpu1 - cpu0).Seconds() * perK
	proxiesCores := (pcpu1 - pcpu0).Seconds() * perK
	sentPerChange := (sent1 - sent0) / float64(o.Changes)
	via := "the members"
	if o.Proxies > 0 {
		via = fmt.Sprintf("%d proxies", o.Proxies)
	}
	say("etcd members at 1,000 changes/s (edges on %s): %.2f cores, %.1f MB/s sent to clients (%.0f bytes per change); proxies %.2f cores",
		via, membersCores, sentPerChange*1000/1e6, sentPerChange, proxiesCores)
	etcdCPUPerChange := float64(cpu1-cpu0) / 1e6 / float64(o.Changes)
	// The edges' CPU per change and edge: what one edge spends on a
	// rebind (decode, index, map write, its client), all of them sharing
	// this machine's cores.
	edgeCPUPerChange := float64(self1-self0) / 1e3 / float64(o.Changes) / float64(n)
	callP50 := percentile(calls, 50)
	say("drift to every edge of the set: p50 %.1f ms, p99 %.1f ms, max %.1f ms (commit call p50 %.2f p99 %.1f ms; delivered to the last edge's sink p50 %.1f p99 %.1f ms); etcd CPU %.1f ms per change (all members), edge CPU %.0f µs per change and edge",
		percentile(worst, 50), percentile(worst, 99), maxOf(worst), callP50, percentile(calls, 99), percentile(delivered, 50), percentile(delivered, 99), etcdCPUPerChange, edgeCPUPerChange)

	// Agreement: a backend (a host) leaves and returns, in every set's
	// service at once (one commit); every edge builds its set's table and
	// the edges of each set must reach the same checksum.
	say("timing %d service changes (every set's service in one commit) until every edge's table checksum agrees with its set's", o.ServiceChanges)
	var agree, agreeDelivered []float64
	sa0 := edgesCPU()
	for c := 0; c < o.ServiceChanges; c++ {
		without := -1
		if c%2 == 0 {
			without = c / 2 % 8
		}
		svcs := make([]model.Object, o.Sets)
		for s := range svcs {
			svcs[s] = fleetService(s, 8, without)
		}
		t0 := time.Now()
		rev, err := region.write(ctx, admin, svcs...)
		if err != nil {
			return nil, fmt.Errorf("fleet: service change: %w", err)
		}
		wantB := 8
		if without >= 0 {
			wantB = 7
		}
		aw, err := awaitEdges(ctx, edges, rev, t0, func(fe *fleetEdge) fleetnode.Cond {
			return fleetnode.Cond{Kind: "table", Key: model.TableKey(fleetServiceName(fe.set), "web"), N: wantB}
		})
		if err != nil {
			return nil, fmt.Errorf("fleet: service change at revision %d: tables of %d backends: %w", rev, wantB, err)
		}
		earlyTables += aw.early
		agree = append(agree, maxOf(aw.ds))
		agreeDelivered = append(agreeDelivered, aw.delivered)
		first := map[int]int{} // set -> its first edge's index
		for i, fe := range edges {
			j, ok := first[fe.set]
			if !ok {
				first[fe.set] = i
			} else if aw.sums[i] != aw.sums[j] {
				return nil, fmt.Errorf("fleet: edge %s: table checksum %s, edge %s has %s", fe.name, aw.sums[i], edges[j].name, aw.sums[j])
			}
		}
	}
	sa1 := edgesCPU()
	edgeCPUPerService := float64(sa1-sa0) / 1e6 / float64(o.ServiceChanges) / float64(n)
	say("agreement of %d tables: p50 %.0f ms, max %.0f ms (delivered to the last edge p50 %.0f ms; edge CPU %.1f ms per service change and edge)",
		n, percentile(agree, 50), maxOf(agree), percentile(agreeDelivered, 50), edgeCPUPerService)
	_, etcdRSS, etcdPeak := usage()
	var etcdCPUTotal time.Duration
	for i := range cl.Members {
		if u, err := cl.Usage(i); err == nil {
			etcdCPUTotal += u.CPU
		}
	}

	// Stop the fleet before the one-edge measurement.
	ecancel()
	wg.Wait()
	if err := procs.stopAll(); err != nil {
		return nil, err
	}
	edges = nil
	runtime.GC()
	debug.FreeOSMemory()

	var agentResults []Result
	if o.Agents > 0 {
		agentResults, err = fleetAgentsRun(ctx, o, edgeEndpoints, &region, admin, hosts, say)
		if err != nil {
			return nil, err
		}
		runtime.GC()
		debug.FreeOSMemory()
	}
	var procHosts []string
	if o.AgentProcs > 0 {
		r, hs, err := fleetAgentProcsRun(ctx, o, edgeEndpoints, &region, hosts, procs, say)
		if err != nil {
			return nil, err
		}
		agentResults, procHosts = append(agentResults, r...), hs
	}
	if o.Restart {
		r, err := fleetRestartRun(ctx, o, edgeEndpoints, &region, setEIPs, hosts, procHosts, procs, say)
		if err != nil {
			return nil, err
		}
		agentResults = append(agentResults, r...)
		runtime.GC()
		debug.FreeOSMemory()
	}

	where := "in one process"
	if o.EdgeProcs == n {
		where = "each its own process"
	} else if o.EdgeProcs > 0 {
		where = fmt.Sprintf("the first %d each its own process, the other %d in one process", o.EdgeProcs, n-o.EdgeProcs)
	}
	shape := fmt.Sprintf("%s (%d edges) %s (each its own etcd client and watch of its set's share, maps faked), %d bound EIPs, %d-member etcd on unix sockets", o.shape(), n, where, o.EIPs, o.Members)
	if o.Proxies > 0 {
		shape += fmt.Sprintf(", edges on %d etcd gRPC proxies (round-robin)", o.Proxies)
	}
	out := []Result{
		{Suite: "fleet", Name: "edges", Value: float64(n), Unit: "", Note: shape},
		{Suite: "fleet", Name: "write_region", Value: writeS, Unit: "s", Note: fmt.Sprintf("%d EIPs and %d hosts in transactions of 1024 ops", o.EIPs, hosts)},
		{Suite: "fleet", Name: "fleet_first_load", Value: loadS, Unit: "s", Note: "every edge's full load of its set's share, 8 at a time"},
		{Suite: "fleet", Name: "edge_set_load_max", Value: edgeLoadMax, Unit: "s", Target: "<= 2 s",
			Note: fmt.Sprintf("the slowest edge's full load of its set (%d to %d EIPs), from its follow start, 8 loading at once on this machine", slices.Min(setEIPs), slices.Max(setEIPs))},
		{Suite: "fleet", Name: "commit_call_p50", Value: callP50, Unit: "ms",
			Note: "a rebind's write as the controller's (its copies planned, then store.Commit at the state's revision: Raft over the members, each fsyncing its WAL) until it returned; the drift starts before it"},
		{Suite: "fleet", Name: "commit_call_p99", Value: percentile(calls, 99), Unit: "ms"},
		{Suite: "fleet", Name: "drift_all_edges_p50", Value: percentile(worst, 50), Unit: "ms", Baseline: "commit_call_p50", BaselineValue: callP50, Ratio: percentile(worst, 50) / callP50,
			Note: fmt.Sprintf("%d rebinds, each from before store.Commit until the last edge of the EIP's set applied it", o.Changes)},
		{Suite: "fleet", Name: "drift_all_edges_p99", Value: percentile(worst, 99), Unit: "ms", Baseline: "commit_call_p50", BaselineValue: callP50, Ratio: percentile(worst, 99) / callP50, Target: "<= 100 ms"},
		{Suite: "fleet", Name: "drift_all_edges_max", Value: maxOf(worst), Unit: "ms"},
		{Suite: "fleet", Name: "drift_applied_early", Value: float64(early), Unit: "",
			Note: "(edge, rebind) pairs where the edge reported the revision applied (OnApplied) before its route changed: a scope follower reports a commit its marker named after at most store.markerWait without its change (1 s until eb0fe29, 10 s since); their drift is until the route was seen"},
		{Suite: "fleet", Name: "table_applied_early", Value: float64(earlyTables), Unit: "", Note: "the same for the service changes' tables"},
		{Suite: "fleet", Name: "drift_delivered_all_edges_p50", Value: percentile(delivered, 50), Unit: "ms", Note: "until the watch handed the change to the last edge's sink (its first Put, Delete or Commit of the revision: before its decode, index and apply)"},
		{Suite: "fleet", Name: "drift_delivered_all_edges_p99", Value: percentile(delivered, 99), Unit: "ms"},
		{Suite: "fleet", Name: "drift_one_edge_p50", Value: percentile(perEdge, 50), Unit: "ms", Note: "over every (edge of the set, change)"},
		{Suite: "fleet", Name: "drift_one_edge_p99", Value: percentile(perEdge, 99), Unit: "ms"},
		{Suite: "fleet", Name: "table_agreement_p50", Value: percentile(agree, 50), Unit: "ms", Note: fmt.Sprintf("%d changes of every set's 8-backend pool in one commit (Maglev M=%d), until all %d edges applied it; checksums then compared within each set", o.ServiceChanges, model.DefaultTableSize, n)},
		{Suite: "fleet", Name: "table_agreement_max", Value: maxOf(agree), Unit: "ms", Target: "<= 1000 ms"},
		{Suite: "fleet", Name: "table_agreement_delivered_p50", Value: percentile(agreeDelivered, 50), Unit: "ms", Note: "until the watch handed the change to the last edge's sink"},
		{Suite: "fleet", Name: "edge_cpu_per_rebind", Value: edgeCPUPerChange, Unit: "µs", Note: "the fleet process's CPU and the edge processes' during the rebinds / changes / edges"},
		{Suite: "fleet", Name: "edge_cpu_per_service_change", Value: edgeCPUPerService, Unit: "ms", Note: "the fleet process's CPU and the edge processes' during the service changes / changes / edges (a Maglev build each)"},
		{Suite: "fleet", Name: "etcd_cpu_per_change", Value: etcdCPUPerChange, Unit: "ms", Note: fmt.Sprintf("all members, during the rebinds (%.1f s)", driftS)},
		{Suite: "fleet", Name: "etcd_proxies", Value: float64(o.Proxies), Unit: "", Note: "etcd gRPC proxies the edges point at (0: the edges use the members)"},
		{Suite: "fleet", Name: "etcd_members_cpu_per_1k_changes_s", Value: membersCores, Unit: "cores",
			Note: fmt.Sprintf("all members' utime+stime during the %d rebinds / changes x 1000, edges on %s", o.Changes, via)},
		{Suite: "fleet", Name: "etcd_members_sent_per_change", Value: sentPerChange, Unit: "bytes",
			Note: "all members' etcd_network_client_grpc_sent_bytes_total during the rebinds / changes"},
		{Suite: "fleet", Name: "etcd_members_sent_per_1k_changes_s", Value: sentPerChange * 1000 / 1e6, Unit: "MB/s"},
		{Suite: "fleet", Name: "etcd_proxies_cpu_per_1k_changes_s", Value: proxiesCores, Unit: "cores", Note: "all proxies' utime+stime during the rebinds / changes x 1000 (0 without proxies)"},
		{Suite: "fleet", Name: "etcd_cpu_total", Value: etcdCPUTotal.Seconds(), Unit: "s", Note: "all members, whole run so far (loads included)"},
		{Suite: "fleet", Name: "etcd_member_rss_max", Value: etcdRSS, Unit: "MB"},
		{Suite: "fleet", Name: "etcd_member_peak_rss_max", Value: etcdPeak, Unit: "MB"},
		{Suite: "fleet", Name: "in_process_heap_per_edge", Value: inProcMB, Unit: "MB", Note: "Go heap of the fleet / edges in this process, fake maps and clients included"},
	}
	if len(ps) > 0 {
		u := procUsage
		most := slices.Max(procSets)
		out = append(out,
			Result{Suite: "fleet", Name: "edge_procs", Value: float64(len(ps)),
				Note: fmt.Sprintf("edge child processes (%s %s): each one edge Reconciler on the fakes following its set's share with edge.FollowShare (the role's), its own etcd client; sets of %d to %d EIPs",
					o.binaryName(), fleetnode.EdgeArg, slices.Min(procSets), most)},
			Result{Suite: "fleet", Name: "edge_proc_load_max", Value: procLoadMax, Unit: "s", Target: "<= 2 s", Note: "the slowest edge process's full load, from its follow start to its first applied revision, 8 loading at once"},
			Result{Suite: "fleet", Name: "edge_proc_rss_p50", Value: percentile(u.rss, 50), Unit: "MB", Note: "VmRSS at rest (2 s after every edge loaded), fake maps included"},
			Result{Suite: "fleet", Name: "edge_proc_rss_max", Value: maxOf(u.rss), Unit: "MB", Target: "<= 64 MB",
				Note: fmt.Sprintf("VmRSS at rest, the largest; edges of sets of up to %d EIPs (the issue's target is with 100k in the set), fake maps included", most)},
			Result{Suite: "fleet", Name: "edge_proc_peak_rss_max", Value: maxOf(u.peak), Unit: "MB", Target: "<= 64 MB", Note: "VmHWM (its load included), the largest"},
			Result{Suite: "fleet", Name: "edge_proc_rss_anon_p50", Value: percentile(u.anon, 50), Unit: "MB"},
			Result{Suite: "fleet", Name: "edge_proc_rss_anon_max", Value: maxOf(u.anon), Unit: "MB", Note: "RssAnon at rest, the largest: the process's own memory"},
			Result{Suite: "fleet", Name: "edge_proc_rss_file_max", Value: maxOf(u.file), Unit: "MB", Note: "RssFile at rest, the largest: file pages (the child binary's text and data, shared by every process of it)"},
			Result{Suite: "fleet", Name: "edge_proc_rss_gc_max", Value: maxOf(u.rssGC), Unit: "MB", Note: "VmRSS after a forced GC and debug.FreeOSMemory, the largest"},
		)
	}

	out = append(out, agentResults...)
	if o.RSSEIPs > 0 {
		total := max(fleetRegionFor(o.RSSEIPs, o.Sets), o.EIPs)
		inSet := fleetInSet(total, 0, o.Sets)
		if total > o.EIPs {
			say("adding EIPs up to %d in the region for the one-edge measurement (set0 then holds %d)", total, inSet)
			var more []model.Object
			for h := hosts; h < fleetHosts(total); h++ {
				more = append(more, fleetHost(h))
			}
			if _, err := region.write(ctx, admin, more...); err != nil {
				return nil, fmt.Errorf("fleet: write hosts: %w", err)
			}
			for lo := o.EIPs; lo < total; lo += 100_000 {
				more = more[:0]
				for i := lo; i < min(lo+100_000, total); i++ {
					more = append(more, fleetEIP(i, i/fleetGuestsPerHost))
				}
				if _, err := region.write(ctx, admin, more...); err != nil {
					return nil, fmt.Errorf("fleet: write EIPs: %w", err)
				}
			}
		}
		say("one edge of set0 alone in a child process, following its set's share: %d of the region's %d EIPs", inSet, total)
		var reps []*FleetEdgeReport
		for range max(o.RSSRuns, 1) {
			rep, err := fleetOneEdge(ctx, o, procs, cl.Endpoints(), inSet)
			if err != nil {
				return nil, err
			}
			say("one edge (%s), %d EIPs in its set (%d in the region): VmRSS %.1f MB, after a forced GC %.1f MB (RssAnon %.1f, RssFile %.1f), VmHWM %.1f MB, of which the fake route map %.1f MB; load %.2f s (CPU %.2f s)",
				o.binaryName(), rep.EIPs, total, rep.RawRSSMB, rep.RSSMB, rep.AnonMB, rep.FileMB, rep.PeakMB, rep.FakeMapsMB, rep.LoadS, rep.LoadCPUS)
			reps = append(reps, rep)
		}
		rep := medianEdgeReport(reps)
		_, etcdRSS, etcdPeak := usage()
		say("etcd members with %d EIPs in the region: RSS %.0f MB (peak %.0f), the largest member", total, etcdRSS, etcdPeak)
		out = append(out,
			Result{Suite: "fleet", Name: fmt.Sprintf("etcd_member_rss_%d_eips", total), Value: etcdRSS, Unit: "MB", Note: "the largest member, after the one-edge load; EIPs of the region, with their copies"},
			Result{Suite: "fleet", Name: fmt.Sprintf("etcd_member_peak_rss_%d_eips", total), Value: etcdPeak, Unit: "MB"})
		out = append(out,
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_rss_%d_eips", rep.EIPs), Value: rep.RSSMB, Unit: "MB",
				Note: "one edge Reconciler on the fakes in its own process, after its full load from the cluster; includes the fake route map"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_peak_rss_%d_eips", rep.EIPs), Value: rep.PeakMB, Unit: "MB", Target: "<= 64 MB",
				Note: fmt.Sprintf("VmHWM, fake route map included; the region held %d EIPs, %d of them outside the edge's set", total, total-rep.EIPs)},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_fake_maps_%d_eips", rep.EIPs), Value: rep.FakeMapsMB, Unit: "MB",
				Note: "Go heap freed by dropping the fake maps: a real edge keeps these in BPF maps (kernel memory, not RSS)"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_rss_minus_fake_%d_eips", rep.EIPs), Value: rep.RSSMB - rep.FakeMapsMB, Unit: "MB", Target: "<= 64 MB",
				Note: "at rest: RSS after the load without the fake maps"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_rss_anon_minus_fake_%d_eips", rep.EIPs), Value: rep.AnonMB - rep.FakeMapsMB, Unit: "MB",
				Note: "at rest: RssAnon (the process's own memory: Go heap, stacks, runtime) without the fake maps"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_rss_file_%d_eips", rep.EIPs), Value: rep.FileMB, Unit: "MB",
				Note: "at rest: RssFile, the child executable's pages mapped (shared page cache, reclaimable; azgate-fleetnode's: the node roles' code and the fakes, as azgate-node's, docs/scale.md)"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_load_cpu_%d_eips", rep.EIPs), Value: rep.LoadCPUS, Unit: "s",
				Note: "the edge process's CPU (user + system) from its start to its load"},
			Result{Suite: "fleet", Name: fmt.Sprintf("edge_load_%d_eips", rep.EIPs), Value: rep.LoadS, Unit: "s", Target: "<= 2 s",
				Note: "the edge alone: its set's share, from its follow start to its first applied revision"},
		)
	}
	for _, r := range out {
		if line, ok := TargetLine(r); ok {
			say("%s", line)
		}
	}
	return out, nil
}

// TargetLine prints r next to its target ("<= N unit", in r's unit):
// "drift_all_edges_p99 41.0 ms (target <= 100 ms) ok"; false when r has
// no target it can compare.
func TargetLine(r Result) (string, bool) {
	var limit float64
	var unit string
	if n, err := fmt.Sscanf(r.Target, "<= %g %s", &limit, &unit); n != 2 || err != nil || unit != r.Unit {
		return "", false
	}
	verdict := "ok"
	if r.Value > limit {
		verdict = "MISSED"
	}
	return fmt.Sprintf("%s %.1f %s (target %s) %s", r.Name, r.Value, r.Unit, r.Target, verdict), true
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// fleetOneEdge runs one edge of set0 alone in a child process (the
// edge child, with o.EdgeProfile) until it loaded its set's eips routes,
// and reports its memory, the heap its fake maps held, and its load.
func fleetOneEdge(ctx context.Context, o FleetOptions, procs *fleetProcs, endpoints []string, eips int) (*FleetEdgeReport, error) {
	ps, err := procs.startLoaded(ctx, o.Binary, []fleetChildSpec{{"s0-e0", edgeChildArgs(endpoints, "s0-e0", 0, o.EdgeProfile)}}, 1)
	if err != nil {
		return nil, err
	}
	p := ps[0]
	rep := &FleetEdgeReport{EIPs: p.load.EIPs, LoadS: p.load.LoadS, LoadCPUS: p.load.LoadCPUS}
	if rep.EIPs != eips {
		return nil, fmt.Errorf("fleet: the one edge holds %d routes after its load, want %d", rep.EIPs, eips)
	}
	u, err := p.askUsage(ctx)
	if err != nil {
		return nil, err
	}
	// After the forced GC, as RSSMB: the file pages do not move with it.
	rep.RSSMB, rep.PeakMB, rep.AnonMB, rep.FileMB, rep.RawRSSMB = u.RSSGCMB, u.PeakMB, u.RSSGCMB-u.FileMB, u.FileMB, u.RSSMB
	d, err := p.ask(ctx, "drop", 30*time.Second)
	if err != nil {
		return nil, err
	}
	rep.FakeMapsMB = d.FakeMapsMB
	return rep, procs.stopAll()
}

// FleetEdgeReport is the one edge's memory and load.
type FleetEdgeReport struct {
	EIPs       int
	LoadS      float64
	RSSMB      float64 // VmRSS after the load, a forced GC and debug.FreeOSMemory
	RawRSSMB   float64 // VmRSS after the load, before the forced GC
	PeakMB     float64 // VmHWM
	FakeMapsMB float64 // the Go heap dropping the fake maps freed
	// AnonMB and FileMB split RSSMB: RssFile (the executable's pages),
	// and the rest; LoadCPUS is the process's CPU until its load.
	AnonMB, FileMB, LoadCPUS float64
}

// medianEdgeReport is each figure's median over reps.
func medianEdgeReport(reps []*FleetEdgeReport) *FleetEdgeReport {
	m := func(f func(*FleetEdgeReport) float64) float64 {
		xs := make([]float64, len(reps))
		for i, r := range reps {
			xs[i] = f(r)
		}
		return median(xs)
	}
	return &FleetEdgeReport{EIPs: reps[0].EIPs,
		LoadS:      m(func(r *FleetEdgeReport) float64 { return r.LoadS }),
		RSSMB:      m(func(r *FleetEdgeReport) float64 { return r.RSSMB }),
		RawRSSMB:   m(func(r *FleetEdgeReport) float64 { return r.RawRSSMB }),
		PeakMB:     m(func(r *FleetEdgeReport) float64 { return r.PeakMB }),
		FakeMapsMB: m(func(r *FleetEdgeReport) float64 { return r.FakeMapsMB }),
		AnonMB:     m(func(r *FleetEdgeReport) float64 { return r.AnonMB }),
		FileMB:     m(func(r *FleetEdgeReport) float64 { return r.FileMB }),
		LoadCPUS:   m(func(r *FleetEdgeReport) float64 { return r.LoadCPUS }),
	}
}

// edgeChildArgs are an edge child's arguments.
func edgeChildArgs(endpoints []string, name string, jitter time.Duration, profile string) []string {
	args := []string{fleetnode.EdgeArg, "--etcd-endpoints", strings.Join(endpoints, ","), "--name", name, "--load-jitter", jitter.String()}
	if profile != "" {
		args = append(args, "--profile", profile)
	}
	return args
}

// newFleetEdge is an edge Reconciler on a fresh fake, noting its applied
// revisions and its first load.
func newFleetEdge(name string, set int) *fleetEdge {
	fe := &fleetEdge{name: name, set: set, fake: dataplane.NewFakeLB(), firstLoad: make(chan struct{})}
	fe.r = fleetnode.NewEdgeReconciler(name, fe.fake)
	fe.r.OnApplied = func(rev int64) {
		if rev > fe.rev.Load() {
			fe.at.Store(time.Now().UnixNano())
			fe.rev.Store(rev)
		}
		fe.once.Do(func() { fe.loadS = time.Since(fe.started).Seconds(); close(fe.firstLoad) })
	}
	return fe
}

// held is how many routes fe holds (an edge process: at its load).
func (fe *fleetEdge) held() int {
	if fe.proc != nil {
		return fe.proc.load.EIPs
	}
	return fe.fake.RouteCount()
}

// fleetAwaited is what awaitEdges measured.
type fleetAwaited struct {
	ds        []float64 // each edge's delay (ms from t0)
	delivered float64   // the last delivery of the revision to an edge's sink (ms from t0)
	early     int       // edges that reported the revision applied before their state showed it
	sums      []string  // each edge's table checksum (table conditions)
}

// awaitEdges waits until every edge of edges applied rev and its state
// shows cond(edge), up to 60 s: an edge in this process is polled, an
// edge process is asked (the await command) and answers when it is so.
// An edge's delay is until it applied rev if its state then showed the
// condition, else until the condition was first seen: a scope follower
// reports a commit its marker named after at most store.markerWait (10 s
// since eb0fe29, 1 s before) even if the change has not arrived; those
// are counted as early.
func awaitEdges(ctx context.Context, edges []*fleetEdge, rev int64, t0 time.Time, cond func(*fleetEdge) fleetnode.Cond) (fleetAwaited, error) {
	n := len(edges)
	aw := fleetAwaited{ds: make([]float64, n), sums: make([]string, n)}
	ms := func(ns int64) float64 { return float64(ns-t0.UnixNano()) / 1e6 }
	type answer struct {
		i   int
		ev  fleetnode.Event
		err error
	}
	answers := make(chan answer, n)
	const limit = 60 * time.Second
	left, polled := n, 0
	for i, fe := range edges {
		if fe.proc == nil {
			polled++
			continue
		}
		go func() {
			ev, err := fe.proc.ask(ctx, fmt.Sprintf("await %d %v", rev, cond(fe)), limit)
			answers <- answer{i, ev, err}
		}()
	}
	state := make([]byte, n) // 0: waiting, 1: applied, its state behind; 2: done
	deadline := time.Now().Add(limit)
	for left > 0 {
		for i, fe := range edges {
			if fe.proc != nil || state[i] == 2 || fe.rev.Load() < rev {
				continue
			}
			if at := fe.seen.At(rev); state[i] == 0 && at > 0 {
				aw.delivered = max(aw.delivered, ms(at))
			}
			ok, sum := cond(fe).Holds(fe.r, fe.fake)
			switch {
			case ok && state[i] == 0:
				aw.ds[i] = ms(fe.at.Load())
			case ok:
				aw.ds[i] = float64(time.Since(t0)) / 1e6
			case state[i] == 0:
				aw.early++
				state[i] = 1
				continue
			default:
				continue
			}
			aw.sums[i], state[i] = sum, 2
			left, polled = left-1, polled-1
		}
		wait := time.Duration(0)
		if polled > 0 {
			wait = 200 * time.Microsecond
		} else if left > 0 {
			wait = time.Until(deadline)
		}
		if left == 0 {
			break
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case a := <-answers:
			if a.err != nil {
				t.Stop()
				return aw, a.err
			}
			aw.ds[a.i], aw.sums[a.i], state[a.i] = ms(a.ev.At), a.ev.Sum, 2
			if a.ev.Seen > 0 {
				aw.delivered = max(aw.delivered, ms(a.ev.Seen))
			}
			if a.ev.Early {
				aw.early++
			}
			left--
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return aw, ctx.Err()
		}
		t.Stop()
		if left > 0 && time.Now().After(deadline) {
			i := slices.IndexFunc(state, func(b byte) bool { return b != 2 })
			return aw, fmt.Errorf("edge %s had not applied revision %d with %v after %v (%d of %d edges)", edges[i].name, rev, cond(edges[i]), limit, left, n)
		}
	}
	return aw, nil
}
