package lbplan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
)

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

func hosts() Hosts {
	return NewHosts([]model.Host{
		{Name: "az1-h1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		{Name: "az2-h1", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 6001}}},
	})
}

func w(n uint32) *uint32 { return &n }

func services() map[string]*model.Service {
	return map[string]*model.Service{
		"web": {Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "tcp", Port: 8000, PortEnd: 8002, Pool: "web"}, {Protocol: "udp", Pool: "web"}},
			Pools: []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}, {Host: "az2-h1", Guest: "g1", Weight: w(2)}, {Host: "az9-h1", Guest: "g1"}},
				Health: &model.HealthCheck{Type: "tcp"}}}},
		"dmz": {Name: "dmz", VIP: a("198.51.100.30"), Mode: model.ModeNAT, TableSize: 1009,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "q"}},
			Pools: []model.Pool{{Name: "q", Backends: []model.Backend{{Address: a("198.19.200.3"), Port: 8443}, {Address: a("198.19.200.4"), Port: 8443, Weight: w(0)}},
				Health: &model.HealthCheck{Type: "tcp", Port: 9000}}}},
	}
}

// TestBuild: the plan holds, per pool, the Maglev table every node
// computes with the down backends failed, the backends' targets, the
// listeners (a range is one entry) and VIPs, the health targets and the
// problems.
func TestBuild(t *testing.T) {
	h := map[string]*model.Health{"web": {Service: "web", Down: map[string][]string{"web": {"az2-h1/g1"}}}}
	p := Build(Input{Services: services(), Health: h, Hosts: hosts(), Seed: 7})

	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0].String(), `backend az9-h1/g1: host "az9-h1" does not exist`) {
		t.Fatalf("problems %q", p.Problems)
	}
	if !p.NAT || len(p.VIPs) != 2 || len(p.Pools) != 2 || p.Pools[0].ID != "dmz/q" || p.Pools[1].ID != "web/web" {
		t.Fatalf("plan %+v", p)
	}
	web := p.Pool("web/web")
	built, _ := maglev.Build([]maglev.Backend{{Key: "az1-h1/g1:8080", Weight: 1}, {Key: "az2-h1/g1", Weight: 2}}, model.DefaultTableSize, 7)
	if web.Built.Checksum() != built.Checksum() || web.Table.Checksum() != built.Fail(map[string]bool{"az2-h1/g1": true}).Checksum() {
		t.Fatal("the pool's tables are not maglev's")
	}
	if web.Healthy != 1 || len(web.Backends) != 2 {
		t.Fatalf("web pool %+v", web)
	}
	for _, b := range web.Backends {
		want := Target{Addr: a("198.18.11.1"), Guest: a("198.19.11.1"), VSID: 5001, Mode: ModeEncap}
		if b.Spec.Host == "az2-h1" {
			want = Target{Addr: a("198.18.21.1"), Guest: a("198.19.21.1"), VSID: 6001, Mode: ModeEncap, Down: true}
		}
		if b.Target != want || b.ID != "web/web/"+b.Spec.Key() {
			t.Errorf("backend %+v, want %+v", b, want)
		}
	}
	dmz := p.Pool("dmz/q")
	if dmz.M != 1009 || dmz.Healthy != 1 || dmz.Backends[0].Target != (Target{Addr: a("198.19.200.3"), Port: 8443, Mode: ModeNAT}) {
		t.Fatalf("dmz pool %+v", dmz)
	}
	wantL := map[Listener]string{
		{VIP: a("198.51.100.20"), Proto: 6, Port: 80}:               "web/web",
		{VIP: a("198.51.100.20"), Proto: 6, Port: 8000, Last: 8002}: "web/web",
		{VIP: a("198.51.100.20"), Proto: 17}:                        "web/web",
		{VIP: a("198.51.100.30"), Proto: 6, Port: 443}:              "dmz/q",
	}
	if fmt.Sprint(p.Listeners) != fmt.Sprint(wantL) {
		t.Fatalf("listeners %v, want %v", p.Listeners, wantL)
	}
	// Checks: on the check's port, else the backend's, else the first
	// listener's; encap checks name the guest and its host.
	got := map[string]Check{}
	for _, c := range p.Checks {
		got[c.Backend] = c
	}
	if len(p.Checks) != 4 || got["az1-h1/g1:8080"].Addr.String() != "198.19.11.1:8080" || got["az2-h1/g1"].Addr.String() != "198.19.21.1:80" ||
		got["az2-h1/g1"].Underlay != a("198.18.21.1") || got["az2-h1/g1"].VSID != 6001 || got["198.19.200.4:8443"].Addr.String() != "198.19.200.4:9000" {
		t.Fatalf("checks %+v", p.Checks)
	}
	// Pure: the same input gives the same plan.
	q := Build(Input{Services: services(), Health: h, Hosts: hosts(), Seed: 7})
	if fmt.Sprint(q.Listeners) != fmt.Sprint(p.Listeners) || q.Pools[1].Table.Checksum() != web.Table.Checksum() {
		t.Fatal("two builds differ")
	}
}

// TestBuildCapacity: a service that would take the edge over a capacity
// is left out whole and reported; the services before it in name order
// stay, so every edge leaves out the same one.
func TestBuildCapacity(t *testing.T) {
	small := func(name string, vip netip.Addr, listeners []model.Listener, pools int) *model.Service {
		s := &model.Service{Name: name, VIP: vip, Mode: model.ModeNAT, TableSize: 101, Listeners: listeners}
		for i := range pools {
			s.Pools = append(s.Pools, model.Pool{Name: fmt.Sprintf("p%d", i), Backends: []model.Backend{{Address: a("198.19.200.1")}}})
		}
		return s
	}
	t.Run("listeners", func(t *testing.T) {
		svcs := map[string]*model.Service{}
		per := model.MaxListeners
		n := ListenersMax/per + 1
		for i := range n {
			var ls []model.Listener
			for j := range per {
				ls = append(ls, model.Listener{Protocol: "tcp", Port: uint16(1 + j), Pool: "p0"})
			}
			vip := netip.AddrFrom4([4]byte{198, 51, byte(100 + i/250), byte(i % 250)})
			svcs[fmt.Sprintf("s%04d", i)] = small(fmt.Sprintf("s%04d", i), vip, ls, 1)
		}
		p := Build(Input{Services: svcs})
		last := fmt.Sprintf("s%04d", n-1)
		if len(p.Services) != n-1 || len(p.Listeners) != ListenersMax || len(p.Problems) != 1 || !strings.HasPrefix(p.Problems[0].String(), "service "+last+": not programmed") {
			t.Fatalf("%d services, %d listeners, problems %q", len(p.Services), len(p.Listeners), p.Problems)
		}
	})
	t.Run("listeners-max", func(t *testing.T) {
		// An edge with --listener-max 10: services of 4 listeners, the
		// third left out (12 > 10) and the fourth too (the room left,
		// 2, is less than its 4); any-port and range listeners take
		// no single-port entry.
		svcs := map[string]*model.Service{}
		for i := range 4 {
			var ls []model.Listener
			for j := range 4 {
				ls = append(ls, model.Listener{Protocol: "tcp", Port: uint16(1 + j), Pool: "p0"})
			}
			vip := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)})
			svcs[fmt.Sprintf("s%d", i)] = small(fmt.Sprintf("s%d", i), vip, ls, 1)
		}
		svcs["t"] = small("t", a("198.51.100.9"), []model.Listener{{Protocol: "tcp", Pool: "p0"}, {Protocol: "udp", Port: 5000, PortEnd: 5010, Pool: "p0"}}, 1)
		p := Build(Input{Services: svcs, ListenersMax: 10})
		if len(p.Services) != 3 || len(p.Listeners) != 10 || len(p.Problems) != 2 {
			t.Fatalf("services %v, %d listeners, problems %q", p.Services, len(p.Listeners), p.Problems)
		}
		for i, name := range []string{"s2", "s3"} {
			if !strings.HasPrefix(p.Problems[i].String(), "service "+name+": not programmed") || !strings.Contains(p.Problems[i].String(), "the data plane holds 10") {
				t.Errorf("problem %d: %q, want %s left out at 10", i, p.Problems[i], name)
			}
		}
		// Above the compiled capacity: the compiled capacity.
		if q := Build(Input{Services: svcs, ListenersMax: 2 * ListenersMax}); len(q.Services) != 5 || len(q.Problems) != 0 {
			t.Errorf("ListenersMax above the ceiling: services %v problems %q", q.Services, q.Problems)
		}
	})
	t.Run("backends-max", func(t *testing.T) {
		// An edge with --backend-max 5: nat services of two backends,
		// the third left out (6 > 5); the reply fallback, two keys per
		// backend (ports 80 and 443), holds 5 of the 8 and counts 3.
		svcs := map[string]*model.Service{}
		for i := range 3 {
			name := fmt.Sprintf("s%d", i)
			s := small(name, netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)}),
				[]model.Listener{{Protocol: "tcp", Port: 80, Pool: "p0"}, {Protocol: "tcp", Port: 443, Pool: "p0"}}, 1)
			s.Pools[0].Backends = []model.Backend{{Address: netip.AddrFrom4([4]byte{198, 19, 200, byte(10*i + 1)})},
				{Address: netip.AddrFrom4([4]byte{198, 19, 200, byte(10*i + 2)})}}
			s.TableSize = 211
			svcs[name] = s
		}
		p := Build(Input{Services: svcs, BackendsMax: 5})
		if len(p.Services) != 2 || len(p.Problems) != 1 || !strings.HasPrefix(p.Problems[0].String(), "service s2: not programmed") ||
			!strings.Contains(p.Problems[0].String(), "the data plane holds 5") {
			t.Fatalf("services %v problems %q", p.Services, p.Problems)
		}
		if len(p.NATBackends) != 5 || p.NATLeftOut != 3 {
			t.Errorf("nat fallback: %d keys, %d left out; want 5 and 3", len(p.NATBackends), p.NATLeftOut)
		}
		if q := Build(Input{Services: svcs}); len(q.Services) != 3 || len(q.NATBackends) != 12 || q.NATLeftOut != 0 {
			t.Errorf("at the compiled capacity: services %v, %d nat keys, %d left out", q.Services, len(q.NATBackends), q.NATLeftOut)
		}
	})
	t.Run("ranges", func(t *testing.T) {
		var a1, a2 []model.Listener
		for i := range RangesMax / 2 {
			a1 = append(a1, model.Listener{Protocol: "tcp", Port: uint16(10000 + 10*i), PortEnd: uint16(10001 + 10*i), Pool: "p0"})
			a2 = append(a2, model.Listener{Protocol: "tcp", Port: uint16(20000 + 10*i), PortEnd: uint16(20001 + 10*i), Pool: "p0"})
		}
		a3 := []model.Listener{{Protocol: "tcp", Port: 30000, PortEnd: 30001, Pool: "p0"}}
		svcs := map[string]*model.Service{"a": small("a", a("198.51.100.1"), a1, 1), "b": small("b", a("198.51.100.1"), a2, 1),
			"c": small("c", a("198.51.100.1"), a3, 1), "d": small("d", a("198.51.100.2"), a3, 1)}
		p := Build(Input{Services: svcs})
		if _, ok := p.Services["c"]; ok || len(p.Services) != 3 || len(p.Problems) != 1 || !strings.Contains(p.Problems[0].String(), "port ranges") {
			t.Fatalf("services %v problems %q", p.Services, p.Problems)
		}
	})
	t.Run("tables", func(t *testing.T) {
		svcs := map[string]*model.Service{}
		for i := range TablesMax/model.MaxPools + 1 {
			name := fmt.Sprintf("s%02d", i)
			svcs[name] = small(name, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p0"}}, model.MaxPools)
		}
		p := Build(Input{Services: svcs})
		if len(p.Pools) != TablesMax || len(p.Problems) != 1 || !strings.Contains(p.Problems[0].String(), "tables") {
			t.Fatalf("%d pools, problems %q", len(p.Pools), p.Problems)
		}
	})
}

// TestLookup: a flow takes the exact-port listener, else the range
// holding its port, else the any-port one; the slot of its hash in the
// pool's failed table; its first choice when that one is down.
func TestLookup(t *testing.T) {
	h := map[string]*model.Health{"web": {Service: "web", Down: map[string][]string{"web": {"az2-h1/g1"}}}}
	svcs := services()
	svcs["web"].Pools = append(svcs["web"].Pools, model.Pool{Name: "other", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 1}}})
	svcs["web"].Listeners[1].Pool = "other"
	p := Build(Input{Services: svcs, Health: h, Hosts: hosts(), Seed: 7})
	flow := func(proto uint8, port uint16) flowhash.Tuple {
		return flowhash.Tuple{Src: a("203.0.113.10"), Dst: a("198.51.100.20"), SrcPort: 40000, DstPort: port, Proto: proto}
	}
	for _, c := range []struct {
		proto    uint8
		port     uint16
		listener string
		pool     string
	}{{6, 80, "tcp:80", "web"}, {6, 8001, "tcp:8000-8002", "other"}, {17, 53, "udp:any", "web"}} {
		ch, err := p.Lookup(flow(c.proto, c.port))
		if err != nil || ch.Listener.String() != c.listener || ch.Pool.Name != c.pool {
			t.Errorf("port %d: %+v %v", c.port, ch, err)
		}
	}
	if _, err := p.Lookup(flow(6, 81)); err == nil {
		t.Error("a flow with no listener found one")
	}
	moved := 0
	for sport := uint16(1); sport < 200; sport++ {
		f := flow(6, 80)
		f.SrcPort = sport
		ch, err := p.Lookup(f)
		if err != nil {
			t.Fatal(err)
		}
		hash := flowhash.Hash4(f, 7)
		if ch.Hash != hash || ch.Slot != uint64(hash)%model.DefaultTableSize || ch.Backend.Spec.Key() != "az1-h1/g1:8080" {
			t.Fatalf("choice %+v", ch)
		}
		if ch.FirstChoice == "az2-h1/g1" {
			moved++
		}
	}
	if moved == 0 {
		t.Error("no flow had the down backend as first choice")
	}
}

// benchServices: n nat services of 2 pools of 10 backends, default M.
func benchServices(n int) map[string]*model.Service {
	svcs := map[string]*model.Service{}
	for i := range n {
		s := &model.Service{Name: fmt.Sprintf("s%03d", i), VIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Mode: model.ModeNAT,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "a"}, {Protocol: "tcp", Port: 443, Pool: "b"}}}
		for _, p := range []string{"a", "b"} {
			pool := model.Pool{Name: p}
			for j := range 10 {
				pool.Backends = append(pool.Backends, model.Backend{Address: netip.AddrFrom4([4]byte{198, 19, byte(i), byte(j)}), Port: 8080})
			}
			s.Pools = append(s.Pools, pool)
		}
		svcs[s.Name] = s
	}
	return svcs
}

// BenchmarkBuild: the plan of 100 services (200 pools of 10 backends,
// M = 65537), which an edge computes on every change of a service, a
// verdict or a host, and the CLI on every lookup.
func BenchmarkBuild(b *testing.B) {
	svcs := benchServices(100)
	for b.Loop() {
		Build(Input{Services: svcs, Seed: 7})
	}
}

// TestTablesMemo: with a memo, an unchanged pool reuses its tables, a
// changed one (a backend down) is rebuilt, and every plan equals the one
// built without a memo; the memo keeps the last plan's tables only.
func TestTablesMemo(t *testing.T) {
	memo := NewTables()
	svcs := services()
	p1 := Build(Input{Services: svcs, Hosts: hosts(), Seed: 7, Tables: memo})
	h := map[string]*model.Health{"web": {Service: "web", Down: map[string][]string{"web": {"az2-h1/g1"}}}}
	p2 := Build(Input{Services: svcs, Health: h, Hosts: hosts(), Seed: 7, Tables: memo})
	plain := Build(Input{Services: svcs, Health: h, Hosts: hosts(), Seed: 7})
	if p2.Pool("dmz/q").Table != p1.Pool("dmz/q").Table {
		t.Error("an unchanged pool's table was rebuilt")
	}
	if p2.Pool("web/web").Table == p1.Pool("web/web").Table || p2.Pool("web/web").Built == p1.Pool("web/web").Built {
		t.Error("a changed pool's table was reused")
	}
	for _, pl := range plain.Pools {
		got := p2.Pool(pl.ID)
		if got.Checksum != pl.Checksum || got.Checksum != got.Table.Checksum() || got.Built.Checksum() != pl.Built.Checksum() {
			t.Errorf("pool %s: the memo's tables differ from a plain build", pl.ID)
		}
	}
	if len(memo.cur) != 2 {
		t.Errorf("the memo holds %d entries, want the 2 pools of the last plan", len(memo.cur))
	}
}

// BenchmarkBuildMemo: the same plan again with a memo (an edge's replan
// after a change to one service).
func BenchmarkBuildMemo(b *testing.B) {
	svcs := benchServices(100)
	memo := NewTables()
	Build(Input{Services: svcs, Seed: 7, Tables: memo})
	for b.Loop() {
		Build(Input{Services: svcs, Seed: 7, Tables: memo})
	}
}

// An IPv6 encap VIP's checks carry the backend guest's IPv6 address on
// the check's port (Addr6) beside its IPv4 one; an IPv4 VIP's do not, nor
// does a guest without an IPv6 address.
func TestChecksAddr6(t *testing.T) {
	hs := NewHosts([]model.Host{
		{Name: "az1-h1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
			{Name: "g1", Address: a("198.19.11.1"), Address6: a("2001:db8:11::1"), VSID: 5001},
			{Name: "g2", Address: a("198.19.11.3"), VSID: 5002}}},
	})
	pool := []model.Pool{{Name: "web", Health: &model.HealthCheck{Type: "tcp"},
		Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}, {Host: "az1-h1", Guest: "g2"}}}}
	svcs := map[string]*model.Service{
		"web6": {Name: "web6", VIP: a("2001:db8:e2::80"), Mode: model.ModeEncap, Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: pool},
		"web4": {Name: "web4", VIP: a("198.51.100.20"), Mode: model.ModeEncap, Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: pool},
	}
	p := Build(Input{Services: svcs, Hosts: hs, Seed: 7})
	got := map[string]netip.AddrPort{}
	for _, c := range p.Checks {
		got[c.Service+" "+c.Backend] = c.Addr6
	}
	want := map[string]netip.AddrPort{
		"web6 az1-h1/g1:8080": netip.MustParseAddrPort("[2001:db8:11::1]:8080"),
		"web6 az1-h1/g2":      {},
		"web4 az1-h1/g1:8080": {},
		"web4 az1-h1/g2":      {},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("checks' Addr6 %v, want %v", got, want)
	}
}
