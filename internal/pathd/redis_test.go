package pathd

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/bwstore/bwstoretest"
	"github.com/azgate/azgate/internal/pathcomp"
	"github.com/azgate/azgate/internal/pathd/hopstore"
)

// hopConfig is the hop store's Config for a test redis-server (started
// with bwstoretest; hopstore itself does not import bwstore).
func hopConfig(c bwstore.RedisConfig) hopstore.Config {
	return hopstore.Config{Network: c.Network, Addr: c.Addr, Username: c.Username, Password: c.Password, TLS: c.TLS, PoolSize: c.PoolSize}
}

func redisHops(t *testing.T, cfg bwstore.RedisConfig) *hopstore.Redis {
	t.Helper()
	h, err := hopstore.NewRedis("eu", hopConfig(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func health(t *testing.T, n *node) int {
	code, _ := do(t, "GET", n.url+"/healthz", "", nil)
	return code
}

// TestRedisRestartAndCluster: two servers of one region share a real
// redis-server: reports taken by one reach the other through the hop
// store; a server restarted (a new process: new Server, new client) loads
// the cluster's figures bit for bit and answers the same path; /healthz
// turns 503 when the redis-server stops.
func TestRedisRestartAndCluster(t *testing.T) {
	_, srv := bwstoretest.Redis(t)
	a := startNode(t, Config{Region: "eu", Instance: "a", Hops: redisHops(t, srv.Config())})
	b := startNode(t, Config{Region: "eu", Instance: "b", Hops: redisHops(t, srv.Config())})
	waitFor(t, "healthz 200", 2*time.Second, func() bool { return health(t, a) == 200 })
	now := time.Now()
	a.post(m("e", "o", true, 20*ms, 0.2, now), m("e", "r1", false, 10*ms, 0, now))
	b.post(m("r1", "o", true, 10*ms, 0.001, now))
	for i := 1; i <= 10; i++ { // the same hop through both servers (ECMP moved the prober)
		n := a
		if i%2 == 0 {
			n = b
		}
		n.post(m("e", "r1", false, time.Duration(10+i)*ms, 0, now.Add(time.Duration(i)*ms)))
		waitFor(t, "the other server has the report", 2*time.Second, func() bool {
			return maps.Equal(a.records(), b.records())
		})
	}
	want := a.records()
	if len(want) != 3 {
		t.Fatalf("%d hops, want 3", len(want))
	}
	waitFor(t, "the detour on both", 2*time.Second, func() bool {
		pa, _ := a.path("e", "o")
		pb, _ := b.path("e", "o")
		return pa.Relays == 1 && pb.Relays == 1
	})
	// Restart a: its figures come back from Redis.
	a.stop()
	c := startNode(t, Config{Region: "eu", Instance: "a", Hops: redisHops(t, srv.Config())})
	if got := c.records(); !maps.Equal(got, want) {
		t.Errorf("after restart: %v\nwant %v", got, want)
	}
	waitFor(t, "the restarted server answers the detour", 2*time.Second, func() bool {
		p, code := c.path("e", "o")
		return code == 200 && p.Relays == 1
	})
	if l := metricLine(c.metrics(), `azgate_pathd_hopstore_events_total{event="restored"}`); l != `azgate_pathd_hopstore_events_total{event="restored"} 3` {
		t.Errorf("restored metric: %q", l)
	}
	// Redis goes away: /healthz says so (the announcer withdraws the
	// server), reports are still taken and wait, dirty, for the store.
	srv.Stop()
	waitFor(t, "healthz 503 with Redis stopped", 5*time.Second, func() bool { return health(t, c) == 503 })
	if rep := c.post(m("e", "o", true, 20*ms, 0.2, now.Add(time.Second))); rep.Applied != 1 {
		t.Errorf("report with Redis down: %+v", rep)
	}
	waitFor(t, "a save error counted", 5*time.Second, func() bool { return c.counters().saveErrors > 0 })
}

// TestRestartFromReplica: with the primary down at startup, a server
// loads the cluster's hops from a replica (a real replicaof pair over
// TCP on 127.0.0.1 with a password).
func TestRestartFromReplica(t *testing.T) {
	ctx := context.Background()
	pw := fmt.Sprintf("pathd-test-%d", time.Now().UnixNano())
	port := freePort(t)
	primary := bwstoretest.Server(t, bwstore.ServerConfig{TCP: fmt.Sprintf("127.0.0.1:%d", port), Password: pw})
	replica := bwstoretest.Server(t, bwstore.ServerConfig{Password: pw})
	rc, _ := bwstore.NewRedis(replica.Config())
	defer rc.Close()
	if err := rc.Client().ConfigSet(ctx, "masterauth", pw).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Client().ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(port)).Err(); err != nil {
		t.Fatal(err)
	}
	mk := func() hopstore.Store {
		h, err := hopstore.NewRedis("eu", hopConfig(primary.Config()), []hopstore.Config{hopConfig(replica.Config())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a := startNode(t, Config{Region: "eu", Instance: "a", Hops: mk()})
	now := time.Now()
	a.post(m("e", "o", true, 20*ms, 0.2, now), m("e", "r1", false, 10*ms, 0, now), m("r1", "o", true, 10*ms, 0, now))
	want := a.records()
	a.stop() // flushes
	waitFor(t, "the replica holds the 3 hops", 10*time.Second, func() bool {
		n, _ := rc.Client().HLen(ctx, "azg:pd:eu:hops").Result()
		return n == 3
	})
	primary.Stop()
	b := startNode(t, Config{Region: "eu", Instance: "b", Hops: mk()})
	if got := b.records(); !maps.Equal(got, want) {
		t.Errorf("loaded from the replica: %v, want %v", got, want)
	}
	if code := health(t, b); code != 503 {
		t.Errorf("healthz with the primary down: %d, want 503 (it cannot keep figures)", code)
	}
}

// TestExpiry: hops not reported for Expire are forgotten here and in the
// hop store; queries for them answer 404.
func TestExpiry(t *testing.T) {
	clock := time.Now()
	var mu = make(chan struct{}, 1)
	now := func() time.Time { mu <- struct{}{}; defer func() { <-mu }(); return clock }
	set := func(t time.Time) { mu <- struct{}{}; clock = t; <-mu }
	hops := hopstore.NewMem()
	n := startNode(t, Config{Region: "eu", Hops: hops, Expire: time.Hour, Now: now, Store: pathcomp.Config{ReportInterval: time.Hour}})
	t0 := now()
	n.post(m("e", "o", true, 5*ms, 0, t0), m("e", "old", true, 5*ms, 0, t0))
	set(t0.Add(50 * time.Minute))
	n.post(m("e", "o", true, 5*ms, 0, now()))
	waitFor(t, "paths", 2*time.Second, func() bool { _, c := n.path("e", "old"); return c == 200 })
	waitFor(t, "hop store has both", 2*time.Second, func() bool { l, _ := hops.Load(context.Background()); return len(l.Records) == 2 })
	set(t0.Add(61 * time.Minute))
	n.s.sweep(context.Background(), now())
	if _, code := n.path("e", "old"); code != 404 {
		t.Errorf("forgotten origin still answered: %d", code)
	}
	if _, code := n.path("e", "o"); code != 200 {
		t.Errorf("live origin: %d", code)
	}
	if l, _ := hops.Load(context.Background()); len(l.Records) != 1 {
		t.Errorf("hop store holds %d rows after expiry, want 1", len(l.Records))
	}
	c := n.counters()
	if c.forgotHops != 1 || c.forgotNodes != 1 {
		t.Errorf("forgot %d hops, %d nodes; want 1, 1", c.forgotHops, c.forgotNodes)
	}
}

// TestBadRowsSkipped: rows in the hop store that do not validate are
// skipped at load and by the sync, and counted.
func TestBadRowsSkipped(t *testing.T) {
	hops := hopstore.NewMem()
	hops.Put("e o", "1 1 5 0 1 99")                    // a time out of range
	hops.Put("e;x o", "1 1 5 0 1 1764763200000000000") // a bad name
	now := time.Now()
	// Valid, but an hour in the future: it would pin the hop live and make
	// its reports stale for that hour; refused like such a report.
	hops.Put("e f", fmt.Sprintf("1 0 5 0 1 %d", now.Add(time.Hour).UnixNano()))
	hops.Save(context.Background(), []pathcomp.HopRecord{{From: "e", To: "r", RTTms: 5, Up: true, Last: now}})
	n := startNode(t, Config{Region: "eu", Hops: hops})
	if got := n.records(); len(got) != 1 {
		t.Errorf("loaded %v, want e r only", got)
	}
	if c := n.counters(); c.refused != 1 {
		t.Errorf("refused %d rows, want 1 (the one from the future)", c.refused)
	}
	hops.Put("e p", "1 1 NaN 0 1 1764763200000000000") // up with no RTT
	waitFor(t, "the sync counts the bad row", 2*time.Second, func() bool { return n.counters().malformed == 3 })
	if l := metricLine(n.metrics(), `azgate_pathd_hopstore_events_total{event="malformed"}`); l != `azgate_pathd_hopstore_events_total{event="malformed"} 3` {
		t.Errorf("metric: %q", l)
	}
}

// TestRegionsWithClusters: three regions, each a cluster of two servers
// sharing the region's own redis-server; the peers' URLs name one server
// of each region (the VIP's pick). Probers alternate between their
// region's two servers (ECMP over new connections). Every one of the six
// servers ends with the same figures: the other server of a region
// learns through Redis, the other regions through forwarding.
func TestRegionsWithClusters(t *testing.T) {
	regions := []string{"eu", "us", "ap"}
	var lns []net.Listener
	for range regions {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
	}
	servers := make([][2]*node, 3)
	for i, r := range regions {
		_, srv := bwstoretest.Redis(t)
		var peers []Peer
		for j, o := range regions {
			if j != i {
				peers = append(peers, Peer{Region: o, URL: "http://" + lns[j].Addr().String()})
			}
		}
		for k := range 2 {
			h, err := hopstore.NewRedis(r, hopConfig(srv.Config()), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			n := newNode(t, Config{Region: r, Instance: fmt.Sprint("s", k), Peers: peers, Hops: h})
			if k == 0 {
				addr := lns[i].Addr().String()
				lns[i].Close()
				n.listen(addr)
			} else {
				n.listen("127.0.0.1:0")
			}
			t.Cleanup(n.closeListener)
			n.run()
			servers[i][k] = n
		}
	}
	base := time.Now().Add(-time.Minute)
	for round := range 12 {
		for i, r := range regions {
			n := servers[i][round%2]
			at := base.Add(time.Duration(round) * time.Second)
			hop := m(r+"-p", fmt.Sprint("relay", round%3), false, time.Duration(5+round)*ms, float64(round%4)/100, at)
			n.post(hop)
			other := servers[i][1-round%2]
			waitFor(t, "the region's other server syncs the hop", 5*time.Second, func() bool {
				other.s.mu.Lock()
				defer other.s.mu.Unlock()
				rec, ok := other.s.store.Record(hop.From, hop.To)
				return ok && rec.Last.Equal(at)
			})
		}
	}
	all := []*node{servers[0][0], servers[0][1], servers[1][0], servers[1][1], servers[2][0], servers[2][1]}
	waitFor(t, "six servers with the same 9 hops", 10*time.Second, func() bool {
		first := all[0].records()
		if len(first) != 9 {
			return false
		}
		for _, n := range all[1:] {
			if !maps.Equal(first, n.records()) {
				return false
			}
		}
		return true
	})
}

// TestStoreDataLoss: when the hop store loses its rows (Redis restarted
// without persistence), the server writes back every hop it holds, so
// the next server to start finds them.
func TestStoreDataLoss(t *testing.T) {
	hops := hopstore.NewMem()
	n := startNode(t, Config{Region: "eu", Hops: hops})
	now := time.Now()
	n.post(m("e", "o", true, 5*ms, 0, now), m("e", "r", false, 5*ms, 0, now))
	count := func() int { l, _ := hops.Load(context.Background()); return len(l.Records) }
	waitFor(t, "2 rows saved", 2*time.Second, func() bool { return count() == 2 })
	hops.Flush()
	n.post(m("e", "x", true, 5*ms, 0, now)) // a new version 1, below the server's cursor
	waitFor(t, "every hop written back", 2*time.Second, func() bool { return count() == 3 })
	if c := n.counters(); c.resets != 1 {
		t.Errorf("resets %d, want 1", c.resets)
	}
}

// pingCounter is a hop store that counts Pings.
type pingCounter struct {
	hopstore.Store
	n atomic.Int64
}

func (p *pingCounter) Ping(ctx context.Context) error { p.n.Add(1); return p.Store.Ping(ctx) }

// TestHealthPingShared: the open /healthz does not reach the hop store
// per request: one Ping per healthTTL answers all of them, concurrent
// ones included, and a store that goes down shows within healthTTL.
func TestHealthPingShared(t *testing.T) {
	mem := hopstore.NewMem()
	hops := &pingCounter{Store: mem}
	n := startNode(t, Config{Region: "eu", Hops: hops})
	h := n.s.Handler()
	get := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
		return w.Code
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if c := get(); c != 200 {
					t.Errorf("healthz %d", c)
				}
			}
		}()
	}
	wg.Wait()
	if got, most := hops.n.Load(), 1+int64(time.Since(start)/healthTTL); got > most {
		t.Errorf("200 requests made %d Pings, want at most %d (one per %v)", got, most, healthTTL)
	}
	mem.SetDown(true)
	waitFor(t, "healthz 503 once the store is down", 2*healthTTL+time.Second, func() bool { return get() == 503 })
}
