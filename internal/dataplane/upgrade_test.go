package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// testPinDir is a pin directory of this test process, removed at the end.
func testPinDir(t *testing.T, what string) string {
	t.Helper()
	if err := EnsureBPFFS(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(BPFFS, fmt.Sprintf("azgt-upg-%d-%s", os.Getpid(), what))
	RemovePins(dir)
	t.Cleanup(func() {
		if err := RemovePins(dir); err != nil {
			t.Errorf("remove pins: %v", err)
		}
	})
	return dir
}

// synthSpec is a small collection: an XDP program and three pinned maps
// whose value size and capacity the tests vary.
func synthSpec(val, max uint32) *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"t_hash": {Name: "t_hash", Type: ebpf.Hash, KeySize: 4, ValueSize: val, MaxEntries: max, Pinning: ebpf.PinByName},
			"t_pcpu": {Name: "t_pcpu", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: val, MaxEntries: max, Pinning: ebpf.PinByName},
			"t_lru":  {Name: "t_lru", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64, Pinning: ebpf.PinByName},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"xdp_t": {Name: "xdp_t", Type: ebpf.XDP, License: "GPL",
				Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}},
		},
	}
}

func loadSynth(spec *ebpf.CollectionSpec, o LoadOptions) (*ebpf.Collection, UpgradeReport, error) {
	up, opts, err := beginLoad(spec, o)
	if err != nil {
		return nil, UpgradeReport{}, err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		up.close()
		return nil, UpgradeReport{}, err
	}
	rep, err := up.finish(coll.Programs)
	if err != nil {
		coll.Close()
		return nil, rep, err
	}
	return coll, rep, nil
}

func actionOf(r UpgradeReport, name string) MapUpgrade {
	for _, m := range r.Maps {
		if m.Name == name {
			return m
		}
	}
	return MapUpgrade{}
}

// TestUpgradeSynthetic: the generic rules on small maps under a program
// attached by a pinned link. A grown value and capacity are migrated (old
// bytes kept, new ones zero, per-CPU values per CPU) and the link swapped
// to the new program; an equal layout is reused; a meaning bump drops a
// config map (empty, reported) and refuses a required one unless allowed.
func TestUpgradeSynthetic(t *testing.T) {
	requireRoot(t)
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	pin := testPinDir(t, "synth")
	o := LoadOptions{PinDir: pin}

	c1, r1, err := loadSynth(synthSpec(8, 16), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r1.Maps {
		if m.Action != ActionCreate {
			t.Fatalf("first load: %s %s", m.Name, m.Action)
		}
	}
	if err := env.Node.Do(func() error { return AttachPinned(c1.Programs["xdp_t"], dptest.ExtDev, pin) }); err != nil {
		t.Fatal(err)
	}
	ncpu := ebpf.MustPossibleCPU()
	for k := uint32(0); k < 10; k++ {
		v := make([]byte, 8)
		binary.LittleEndian.PutUint64(v, 0x1111111111111111*uint64(k+1))
		if err := c1.Maps["t_hash"].Update(k, v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		pv := make([][]byte, ncpu)
		for c := range pv {
			pv[c] = make([]byte, 8)
			binary.LittleEndian.PutUint64(pv[c], uint64(1000*k)+uint64(c))
		}
		if err := c1.Maps["t_pcpu"].Update(k, pv, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		if err := c1.Maps["t_lru"].Update(k, uint64(k), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	oldProg, _ := c1.Programs["xdp_t"].Info()
	oldID, _ := oldProg.ID()
	c1.Close()

	// Value 8 -> 16 bytes, capacity 16 -> 32.
	c2, r2, err := loadSynth(synthSpec(16, 32), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for _, n := range []string{"t_hash", "t_pcpu"} {
		if m := actionOf(r2, n); m.Action != ActionMigrate || m.Copied != 10 && n == "t_hash" {
			t.Fatalf("%s: %+v", n, m)
		}
	}
	if m := actionOf(r2, "t_lru"); m.Action != ActionReuse {
		t.Fatalf("t_lru: %+v", m)
	}
	if len(r2.Swapped) != 1 {
		t.Fatalf("swapped %v, want the one link", r2.Swapped)
	}
	// The pins are the new maps, with the old entries.
	h, err := ebpf.LoadPinnedMap(filepath.Join(pin, "t_hash"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.ValueSize() != 16 || h.MaxEntries() != 32 {
		t.Fatalf("pinned t_hash is %d bytes x %d", h.ValueSize(), h.MaxEntries())
	}
	for k := uint32(0); k < 10; k++ {
		v, err := h.LookupBytes(k)
		if err != nil || len(v) != 16 {
			t.Fatalf("key %d: %x %v", k, v, err)
		}
		if binary.LittleEndian.Uint64(v) != 0x1111111111111111*uint64(k+1) || binary.LittleEndian.Uint64(v[8:]) != 0 {
			t.Fatalf("key %d migrated as %x", k, v)
		}
		var pv [][]byte
		if err := c2.Maps["t_pcpu"].Lookup(k, &pv); err != nil {
			t.Fatal(err)
		}
		for c := range pv {
			if binary.LittleEndian.Uint64(pv[c]) != uint64(1000*k)+uint64(c) || binary.LittleEndian.Uint64(pv[c][8:]) != 0 {
				t.Fatalf("per-CPU key %d cpu %d migrated as %x", k, c, pv[c])
			}
		}
	}
	// The link runs the new program.
	l, err := link.LoadPinnedLink(filepath.Join(pin, "links", dptest.ExtDev), nil)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := l.Info()
	l.Close()
	newProg, _ := c2.Programs["xdp_t"].Info()
	newID, _ := newProg.ID()
	if li.Program != newID || li.Program == oldID {
		t.Fatalf("link runs program %d; old %d, new %d", li.Program, oldID, newID)
	}

	// Same layout again: everything reused, nothing swapped.
	c3, r3, err := loadSynth(synthSpec(16, 32), o)
	if err != nil {
		t.Fatal(err)
	}
	c3.Close()
	if len(r3.Changed()) != 0 || len(r3.Swapped) != 0 {
		t.Fatalf("equal layouts: %+v", r3)
	}

	// A meaning bump of a config map: not trusted, empty.
	mapMeaning["t_hash"] = 2
	defer delete(mapMeaning, "t_hash")
	c4, r4, err := loadSynth(synthSpec(16, 32), o)
	if err != nil {
		t.Fatal(err)
	}
	c4.Close()
	if m := actionOf(r4, "t_hash"); m.Action != ActionDrop || m.Why != "meaning version 1 -> 2" {
		t.Fatalf("t_hash after a meaning bump: %+v", m)
	}
	h2, err := ebpf.LoadPinnedMap(filepath.Join(pin, "t_hash"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := h2.NextKeyBytes(nil); err != nil || k != nil {
		t.Fatalf("dropped map holds key %x (%v)", k, err)
	}
	h2.Close()

	// A meaning bump of a required map: refused, nothing changed.
	mapClasses["t_lru"] = ClassRequired
	mapMeaning["t_lru"] = 2
	defer delete(mapClasses, "t_lru")
	defer delete(mapMeaning, "t_lru")
	if _, _, err := loadSynth(synthSpec(16, 32), o); !errors.Is(err, ErrUpgradeRefused) {
		t.Fatalf("required map dropped: %v", err)
	}
	lru, err := ebpf.LoadPinnedMap(filepath.Join(pin, "t_lru"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	if err := lru.Lookup(uint32(7), &v); err != nil || v != 7 {
		t.Fatalf("refused upgrade changed t_lru: %d %v", v, err)
	}
	lru.Close()
	o.AllowDrop = []string{"t_lru"}
	c5, r5, err := loadSynth(synthSpec(16, 32), o)
	if err != nil {
		t.Fatal(err)
	}
	c5.Close()
	if m := actionOf(r5, "t_lru"); m.Action != ActionDrop {
		t.Fatalf("allowed drop: %+v", m)
	}
}

// loadPrevEdge loads an edge object as the previous release's loader did:
// maps pinned by name through cilium/ebpf's PinPath, no layout records.
func loadPrevEdge(spec *ebpf.CollectionSpec, o LoadOptions) (*Edge, error) {
	edgeCapacities(spec, o)
	if err := os.MkdirAll(filepath.Join(o.PinDir, "links"), 0o700); err != nil {
		return nil, err
	}
	e := &Edge{pinDir: o.PinDir, links: map[string]link.Link{}}
	if err := loadInto(spec, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: o.PinDir}}, &e.objs); err != nil {
		return nil, err
	}
	if e.objs.IcmpKinds == nil {
		// The previous release has no icmp_kinds (its programs read the
		// ICMP rate from edge_cfg, which SetConfig still writes): give
		// this tree's SetConfig an unpinned one that nothing reads.
		m, err := scratchMap(loadEdge, edgeMapIcmpKinds)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.objs.IcmpKinds = m
	}
	if err := e.startListenerGens(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// scratchMap makes an unpinned map from this tree's spec of map name.
func scratchMap(load func() (*ebpf.CollectionSpec, error), name string) (*ebpf.Map, error) {
	cur, err := load()
	if err != nil {
		return nil, err
	}
	ms := cur.Maps[name].Copy()
	ms.Pinning = ebpf.PinNone
	return ebpf.NewMap(ms)
}

// loadPrevAgent: loadPrevEdge for the agent.
func loadPrevAgent(spec *ebpf.CollectionSpec, o LoadOptions) (*Agent, error) {
	spec.Maps[agentMapAgentFlows].MaxEntries = o.AgentFlowMax
	if err := os.MkdirAll(filepath.Join(o.PinDir, "links"), 0o700); err != nil {
		return nil, err
	}
	a := &Agent{pinDir: o.PinDir, links: map[string]link.Link{}}
	if err := loadInto(spec, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: o.PinDir}}, &a.objs); err != nil {
		return nil, err
	}
	if a.objs.IcmpKinds == nil {
		m, err := scratchMap(loadAgent, agentMapIcmpKinds)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.objs.IcmpKinds = m
	}
	return a, nil
}

// attachXDPPass attaches an XDP_PASS program to dev of a namespace: a veth
// receiving redirected frames drops them unless its peer runs XDP.
func attachXDPPass(t *testing.T, do func(func() error) error, dev string) {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var l link.Link
	if err := do(func() error {
		idx, err := ifindexHere(dev)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: p, Interface: idx})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

func ifindexHere(dev string) (int, error) {
	var idx int
	ifs, err := netInterfaces()
	if err != nil {
		return 0, err
	}
	for _, i := range ifs {
		if i.Name == dev {
			idx = i.Index
		}
	}
	if idx == 0 {
		return 0, fmt.Errorf("no interface %s", dev)
	}
	return idx, nil
}

// rawSocket opens an AF_PACKET socket on dev of the namespace do runs in;
// proto 0 only sends.
func rawSocket(t *testing.T, do func(func() error) error, dev string, proto uint16) (int, int) {
	t.Helper()
	var fd, idx int
	if err := do(func() error {
		var err error
		if idx, err = ifindexHere(dev); err != nil {
			return err
		}
		p := int(htons(proto))
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, p); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: idx})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd, idx
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// streamResult is what stream measured.
type streamResult struct {
	got           map[uint64]string // sequence -> where it arrived
	total, during uint64            // requests sent; sent while upgrading
	sendErrs      uint64
	took          time.Duration // the upgrade
	err           error         // the upgrade's
}

// stream sends requests (send(seq), 8 a millisecond) for a second, runs
// upgrade while they go on, goes on for a second more, and collects what
// rx receives (parse: sequence number and where it went).
func stream(t *testing.T, rx int, send func(uint64) error, parse func([]byte) (uint64, string, bool), upgrade func() error) streamResult {
	t.Helper()
	var (
		mu       sync.Mutex
		got      = map[uint64]string{}
		sent     atomic.Uint64
		stop     atomic.Bool
		sendErrs atomic.Uint64
		wg       sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, _, err := unix.Recvfrom(rx, buf, 0)
			if err != nil {
				if stop.Load() {
					return
				}
				continue
			}
			if seq, where, ok := parse(buf[:n]); ok {
				mu.Lock()
				got[seq] = where
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		seq := uint64(0)
		for !stop.Load() {
			<-tick.C
			for j := 0; j < 8; j++ {
				seq++
				if err := send(seq); err != nil {
					sendErrs.Add(1)
				}
				sent.Store(seq)
			}
		}
	}()
	time.Sleep(time.Second)
	before := sent.Load()
	t0 := time.Now()
	err := upgrade()
	r := streamResult{took: time.Since(t0), during: sent.Load() - before, err: err}
	if err == nil {
		time.Sleep(time.Second)
	}
	stop.Store(true)
	time.Sleep(300 * time.Millisecond) // the last frames land
	wg.Wait()
	r.total, r.sendErrs = sent.Load(), sendErrs.Load()
	mu.Lock()
	r.got = got
	mu.Unlock()
	return r
}

// TestUpgradeEdgeUnderTraffic: the previous release's edge objects
// (testdata/prev) run pinned and attached on a veth of a namespace, as an
// edge in nat mode; 64 client connections to a VIP are made through them
// and the pool then changes (so a connection without its entry could move
// to the new backend). While the connections send a steady stream through
// the attached program (frames from the router's namespace into ext0, taken
// off the underlay's side after DNAT), this tree's objects are loaded on
// the same pins: the maps whose layout changed are migrated and the link
// is swapped. Every request must arrive, at its connection's backend, and
// the connection table must hold every connection afterwards.
func TestUpgradeEdgeUnderTraffic(t *testing.T) {
	requireRoot(t)
	prev, err := ebpf.LoadCollectionSpec("testdata/prev/edge_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	pin := testPinDir(t, "edge")
	o := LoadOptions{PinDir: pin, EIPMax: 1024, ConnMax: 65536}
	old, err := loadPrevEdge(prev, o)
	if err != nil {
		t.Fatal(err)
	}
	ul := mustIfindex(t, env, dptest.UlDev)
	if err := old.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC), UnderlayIfindex: uint32(ul)}); err != nil {
		t.Fatal(err)
	}
	b := withServices(t, &edgeBed{env: env, edge: old})
	if err := env.Node.Do(func() error { return AttachPinned(old.Program(), dptest.ExtDev, pin) }); err != nil {
		t.Fatal(err)
	}
	attachXDPPass(t, env.Peer.Do, "fab")
	tx, txIdx := rawSocket(t, env.Peer.Do, "rtr", 0)
	rx, _ := rawSocket(t, env.Peer.Do, "fab", unix.ETH_P_ALL)
	unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
	unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	send := func(f flow) error {
		return unix.Sendto(tx, f.frame(t, dptest.RtrMAC, dptest.ExtMAC), 0,
			&unix.SockaddrLinklayer{Ifindex: txIdx, Halen: 6, Addr: [8]byte{0x02, 0xaa, 0, 0, 0, 1}})
	}

	const nconn = 64
	const sport0 = 41000
	seqOf := func(f []byte) (sport uint16, seq uint64, dst string, ok bool) {
		p := decode(f)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil || ip.SrcIP.String() != client || tcp.SrcPort < sport0 || tcp.SrcPort >= sport0+nconn+1000 {
			return 0, 0, "", false
		}
		if len(tcp.Payload) >= 8 {
			seq = binary.BigEndian.Uint64(tcp.Payload)
		}
		return uint16(tcp.SrcPort), seq, ip.DstIP.String(), true
	}
	// The connections, all to A (table 0 names A only).
	backend := map[uint16]string{}
	for i := 0; i < nconn; i++ {
		f := tcpTo(vipNAT, 80, "syn")
		f.sport = uint16(sport0 + i)
		if err := send(f); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(3 * time.Second); len(backend) < nconn && time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(rx, buf, 0)
		if err != nil {
			continue
		}
		if sp, _, dst, ok := seqOf(buf[:n]); ok {
			backend[sp] = dst
		}
	}
	if len(backend) != nconn {
		t.Fatalf("%d of %d SYNs came through the previous release's program", len(backend), nconn)
	}
	for sp, be := range backend {
		if be != beA {
			t.Fatalf("connection %d went to %s", sp, be)
		}
	}
	// The pool changes: new connections spread over A and C; these keep A
	// by their entries only.
	b.table(t, 0, "a", "c")
	old.Close() // the pins hold it, as after its daemon exits

	// Requests: ACKs of the connections, round robin, each carrying its
	// sequence number; about 8 per millisecond.
	var cur *Edge
	st := stream(t, rx, func(seq uint64) error {
		f := tcpTo(vipNAT, 80, "ack")
		f.sport = uint16(sport0 + int(seq%nconn))
		f.payload = binary.BigEndian.AppendUint64(nil, seq)
		return send(f)
	}, func(f []byte) (uint64, string, bool) {
		_, seq, dst, ok := seqOf(f)
		return seq, dst, ok && seq > 0
	}, func() error {
		var err error
		if cur, err = LoadEdge(o); err != nil {
			return err
		}
		// The daemon attaches next: the link already runs this program.
		return env.Node.Do(func() error { return cur.Attach(dptest.ExtDev) })
	})
	if cur != nil {
		defer cur.Close()
	}
	if st.err != nil {
		t.Fatal(st.err)
	}
	took, during, total, sendErrs := st.took, st.during, st.total, st.sendErrs
	got := st.got
	rep := cur.Upgrade()
	for _, m := range rep.Maps {
		if m.Action != ActionReuse {
			t.Logf("map %-16s %-8s %s (copied %d, lost %d, caught up %d)", m.Name, m.Action, m.Why, m.Copied, m.Lost, m.CaughtUp)
		}
		// Counters may restart (a counter struct reordered); anything
		// else dropped on the way from the previous release is a bug
		// (or a change that needs a conversion in docs/upgrades.md).
		// hc_peers changed key (issue 21: IPv6 guests' health checks):
		// it starts empty and the daemon rewrites it with its targets
		// (the checks' answers are dropped until then).
		if m.Action == ActionDrop && m.Class != ClassCounters && m.Name != "hc_peers" {
			t.Errorf("map %s (%s) dropped in an upgrade from the previous release: %s", m.Name, m.Class, m.Why)
		}
	}
	if m := actionOf(rep, "lb_conns"); m.Action != ActionReuse && m.Action != ActionMigrate {
		t.Errorf("connection table %s", m.Action)
	}
	var missing, moved uint64
	for s := uint64(1); s <= total; s++ {
		dst, ok := got[s]
		switch {
		case !ok:
			missing++
		case dst != beA:
			moved++
		}
	}
	t.Logf("upgrade: load %v (swap of %d links %v); requests %d, %d sent while loading; failed %d (missing %d, moved to another backend %d); send errors %d",
		took.Round(time.Millisecond), len(rep.Swapped), rep.SwapTook, total, during, missing+moved, missing, moved, sendErrs)
	if missing+moved != 0 || sendErrs != 0 {
		t.Fatalf("%d of %d requests failed (%d missing, %d at another backend)", missing+moved, total, missing, moved)
	}
	if len(rep.Changed()) > 0 && len(rep.Swapped) != 1 {
		t.Errorf("maps changed but %d links swapped", len(rep.Swapped))
	}
	// Every connection is in the new program's table, with its backend.
	kept := 0
	if err := cur.Conns(func(c Conn) bool {
		if c.Dst == addr(vipNAT) && c.Sport >= sport0 && c.Sport < sport0+nconn {
			kept++
			if c.Backend != b.idx["a"] {
				t.Errorf("connection %d: backend %d", c.Sport, c.Backend)
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if kept != nconn {
		t.Fatalf("%d of %d connection entries survived", kept, nconn)
	}
	// The check has teeth: new connections do reach C now.
	toC := 0
	for i := 0; i < 64; i++ {
		f := tcpTo(vipNAT, 80, "syn")
		f.sport = uint16(sport0 + nconn + 100 + i)
		if err := send(f); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(rx, buf, 0)
		if err != nil {
			continue
		}
		if sp, _, dst, ok := seqOf(buf[:n]); ok && sp >= sport0+nconn && dst == beC {
			toC++
		}
	}
	if toC == 0 {
		t.Fatal("no new connection went to C: the pool change did not take, the test proves nothing")
	}
}

// TestUpgradeAgent: the previous release's agent objects, pinned and
// attached to the underlay and a guest interface (configured as
// newAgentBed's), decapsulate a stream of requests from an edge (NVGRE
// frames sent into ul0 from the underlay router's namespace, taken off the
// guest's end after translation) while this tree's objects load on the
// same pins. Every request must reach the guest; both links run the new
// programs of the same names; the flow table's entries are kept.
func TestUpgradeAgent(t *testing.T) {
	requireRoot(t)
	prev, err := ebpf.LoadCollectionSpec("testdata/prev/agent_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	pin := testPinDir(t, "agent")
	o := LoadOptions{PinDir: pin, AgentFlowMax: 4096}
	old, err := loadPrevAgent(prev, o)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	g1 := mustIfindex(t, env, dptest.GuestDev)
	must(old.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: []netip.Addr{addr(edgeA), addr(edgeB)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}))
	must(old.SetGroup(0, AgentGroup{Members: []netip.Addr{addr(edgeA), addr(edgeB)}}))
	// The previous objects' agent_local holds a __u32 (1: to the kernel,
	// anything); its meaning changed (mapMeaning), so the load below
	// starts the map empty for the agent to rewrite.
	must(old.objs.AgentLocal.Update(agentLpm4Key{Prefixlen: 24, Addr: binary.LittleEndian.Uint32(ip4("198.18.5.0"))}, uint32(1), ebpf.UpdateAny))
	must(old.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: uint32(g1)}))
	must(old.SetIfAddrs([]IfAddr{{Ifindex: uint32(g1), Addr: addr(dptest.GuestAddr)}}))
	must(env.Node.Do(func() error {
		if err := AttachPinned(old.UnderlayProgram(), dptest.UlDev, pin); err != nil {
			return err
		}
		return AttachPinned(old.GuestProgram(), dptest.GuestDev, pin)
	}))
	ks, vs := int(old.objs.AgentFlows.KeySize()), int(old.objs.AgentFlows.ValueSize())
	for i := 0; i < 100; i++ {
		k, v := make([]byte, ks), make([]byte, vs)
		k[0], k[1], v[0] = byte(i), 0xa5, byte(i)
		must(old.objs.AgentFlows.Update(k, v, ebpf.UpdateAny))
	}
	old.Close()

	attachXDPPass(t, env.Peer.Do, "vm")
	tx, txIdx := rawSocket(t, env.Peer.Do, "fab", 0)
	rx, _ := rawSocket(t, env.Peer.Do, "vm", unix.ETH_P_ALL)
	unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
	unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	key := uint32(vsid<<8 | 0x33)
	var cur *Agent
	st := stream(t, rx, func(seq uint64) error {
		f := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1000 + uint16(seq%64), dport: 53, ttl: 63,
			payload: binary.BigEndian.AppendUint64(nil, seq)}
		frame := nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, "02:00:c6:33:64:07", f.ip(t)))
		return unix.Sendto(tx, frame, 0, &unix.SockaddrLinklayer{Ifindex: txIdx, Halen: 6, Addr: [8]byte{0x02, 0xbb, 0, 0, 0, 1}})
	}, func(b []byte) (uint64, string, bool) {
		p := decode(b)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || ip.SrcIP.String() != client || len(udp.Payload) < 8 {
			return 0, "", false
		}
		return binary.BigEndian.Uint64(udp.Payload), ip.DstIP.String(), true
	}, func() error {
		var err error
		cur, err = LoadAgent(o)
		return err
	})
	if cur != nil {
		defer cur.Close()
	}
	if st.err != nil {
		t.Fatal(st.err)
	}
	var missing, wrong uint64
	for s := uint64(1); s <= st.total; s++ {
		switch dst, ok := st.got[s]; {
		case !ok:
			missing++
		case dst != dptest.GuestAddr:
			wrong++
		}
	}
	rep := cur.Upgrade()
	for _, m := range rep.Maps {
		if m.Action != ActionReuse {
			t.Logf("map %-16s %-8s %s (copied %d)", m.Name, m.Action, m.Why, m.Copied)
		}
		// agent_local changed meaning (issue 17: rules, not "anything"):
		// it starts empty, guests reach nothing of the host until the
		// agent writes its checked rules.
		if m.Action == ActionDrop && m.Class != ClassCounters && m.Name != "agent_local" {
			t.Errorf("map %s (%s) dropped: %s", m.Name, m.Class, m.Why)
		}
	}
	t.Logf("agent upgrade: load %v (swap of %d links %v); requests %d, %d sent while loading; failed %d (missing %d, translated wrong %d); send errors %d",
		st.took.Round(time.Millisecond), len(rep.Swapped), rep.SwapTook, st.total, st.during, missing+wrong, missing, wrong, st.sendErrs)
	if missing+wrong != 0 || st.sendErrs != 0 {
		t.Fatalf("%d of %d requests failed", missing+wrong, st.total)
	}
	if len(rep.Changed()) > 0 && len(rep.Swapped) != 2 {
		t.Fatalf("maps changed but links swapped: %v", rep.Swapped)
	}
	for dev, p := range map[string]*ebpf.Program{dptest.UlDev: cur.UnderlayProgram(), dptest.GuestDev: cur.GuestProgram()} {
		l, err := link.LoadPinnedLink(filepath.Join(pin, "links", dev), nil)
		if err != nil {
			t.Fatal(err)
		}
		li, _ := l.Info()
		l.Close()
		pi, _ := p.Info()
		id, _ := pi.ID()
		if len(rep.Swapped) > 0 && li.Program != id {
			t.Errorf("%s runs program %d, not the new %s (%d)", dev, li.Program, pi.Name, id)
		}
	}
	n := 0
	k := make([]byte, ks)
	v := make([]byte, vs)
	it := cur.objs.AgentFlows.Iterate()
	for it.Next(&k, &v) {
		if k[1] == 0xa5 && v[0] == k[0] {
			n++
		}
	}
	if n != 100 {
		t.Fatalf("%d of 100 flow entries kept", n)
	}
}

// TestUpgradeTablesNameMaps: every map named in mapMeaning, mapClasses and
// dropTogether is a pinned map of the edge or agent objects (a renamed
// map must take its entries along), and no object defines a map named
// azg_layout.
func TestUpgradeTablesNameMaps(t *testing.T) {
	pinned := map[string]bool{}
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadEdge, loadAgent} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name, ms := range spec.Maps {
			if ms.Pinning == ebpf.PinByName {
				pinned[name] = true
			}
		}
	}
	if pinned[layoutMapName] {
		t.Fatalf("an object defines %s, the loader's layout records", layoutMapName)
	}
	var names []string
	for n := range mapMeaning {
		names = append(names, n)
	}
	for n := range mapClasses {
		names = append(names, n)
	}
	for _, g := range dropTogether {
		names = append(names, g...)
	}
	for _, n := range names {
		if !pinned[n] {
			t.Errorf("upgrade.go names %s, which no object pins", n)
		}
	}
}

func netInterfaces() ([]net.Interface, error) { return net.Interfaces() }

// btfLeaves flattens a key or value type into its leaf fields,
// "path@offset:size", nested structs expanded.
func btfLeaves(typ btf.Type, prefix string, base uint32, out []string) []string {
	typ = btf.UnderlyingType(typ)
	if s, ok := typ.(*btf.Struct); ok {
		for _, m := range s.Members {
			out = btfLeaves(m.Type, prefix+"."+m.Name, base+m.Offset.Bytes(), out)
		}
		return out
	}
	size, err := btf.Sizeof(typ)
	if err != nil {
		size = -1
	}
	return append(out, fmt.Sprintf("%s@%d:%d", prefix, base, size))
}

// TestMapLayoutsAgainstPreviousRelease holds every pinned map of this
// tree's objects to the previous release's (testdata/prev): a key must
// keep its fields, and a value may only grow by fields appended at its
// end, unless the map's meaning version (mapMeaning) was bumped, which
// makes an upgrade drop or refuse it (docs/upgrades.md). A field inserted,
// moved, resized or renamed with the meaning kept would be migrated byte
// for byte into the wrong field: this is the test that says so.
func TestMapLayoutsAgainstPreviousRelease(t *testing.T) {
	for obj, load := range map[string]func() (*ebpf.CollectionSpec, error){"edge": loadEdge, "agent": loadAgent} {
		cur, err := load()
		if err != nil {
			t.Fatal(err)
		}
		prev, err := ebpf.LoadCollectionSpec("testdata/prev/" + obj + "_bpfel.o")
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for name, ms := range cur.Maps {
			old := prev.Maps[name]
			if ms.Pinning != ebpf.PinByName || old == nil || meaningOf(name) != 1 {
				continue
			}
			checked++
			if ms.Key != nil && old.Key != nil {
				k0, k1 := btfLeaves(old.Key, "key", 0, nil), btfLeaves(ms.Key, "key", 0, nil)
				if !slices.Equal(k0, k1) {
					t.Errorf("%s map %s: key %v was %v: bump mapMeaning[%q] (upgrade.go)", obj, name, k1, k0, name)
				}
			}
			if ms.Value != nil && old.Value != nil {
				v0, v1 := btfLeaves(old.Value, "value", 0, nil), btfLeaves(ms.Value, "value", 0, nil)
				if len(v1) < len(v0) || !slices.Equal(v0, v1[:len(v0)]) {
					t.Errorf("%s map %s: value %v was %v: only fields appended at the end keep the meaning; "+
						"bump mapMeaning[%q] (upgrade.go) or append instead", obj, name, v1, v0, name)
				}
			}
		}
		if checked < 10 {
			t.Errorf("%s: only %d maps compared", obj, checked)
		}
	}
}

// TestUpgradeCopyRate measures a migration's copy: 100k entries of a
// connection-table-sized hash map into one with a grown value (run -v).
func TestUpgradeCopyRate(t *testing.T) {
	requireRoot(t)
	const n = 100_000
	mk := func(val uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 16, ValueSize: val, MaxEntries: 2 * n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	old, nw := mk(12), mk(16)
	keys := make([][16]byte, n)
	vals := make([][12]byte, n)
	for i := range keys {
		binary.LittleEndian.PutUint32(keys[i][:], uint32(i))
		binary.LittleEndian.PutUint32(vals[i][:], uint32(i))
	}
	if _, err := old.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	ol := MapLayout{Type: ebpf.LRUHash, KeySize: 16, ValueSize: 12, MaxEntries: 2 * n}
	nl := ol
	nl.ValueSize = 16
	t0 := time.Now()
	copied, lost, err := copyEntries(old, nw, ol, nl, ebpf.UpdateAny)
	took := time.Since(t0)
	if err != nil || copied != n || lost != 0 {
		t.Fatalf("copied %d lost %d: %v", copied, lost, err)
	}
	t.Logf("%d entries in %v: %.0f ns each", n, took.Round(time.Millisecond), float64(took.Nanoseconds())/n)
}
