package hopstore

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/bwstore/bwstoretest"
	"github.com/azgate/azgate/internal/pathcomp"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func rec(from, to string, rtt float64, at time.Time) pathcomp.HopRecord {
	return pathcomp.HopRecord{From: from, To: to, RTTms: rtt, Loss: 0.01, Up: true, Last: at}
}

type maker func(t *testing.T) (Store, func(field, value string))

func redisMaker(t *testing.T) (Store, func(string, string)) {
	r, srv := bwstoretest.Redis(t)
	r.Close()
	s, err := NewRedis("eu-1", configOf(srv.Config()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	put := func(f, v string) {
		if err := s.Client().HSet(context.Background(), s.hops, f, v).Err(); err != nil {
			t.Fatal(err)
		}
		s.Client().ZAdd(context.Background(), s.vers, redisZ(f))
	}
	return s, put
}

func memMaker(t *testing.T) (Store, func(string, string)) {
	m := NewMem()
	return m, m.Put
}

// TestConformance runs the same checks on the in-process store and on a
// real redis-server: rows read back bit for bit, Changes returns exactly
// what was written after a cursor, bad rows are skipped and counted, and
// Expire deletes old and bad rows only.
func TestConformance(t *testing.T) {
	for name, mk := range map[string]maker{"mem": memMaker, "redis": redisMaker} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, put := mk(t)
			if err := s.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			l, err := s.Load(ctx)
			if err != nil || len(l.Records) != 0 {
				t.Fatalf("empty load: %v %v", l, err)
			}
			want := map[string]pathcomp.HopRecord{}
			var batch []pathcomp.HopRecord
			for i := range 3000 { // over one save chunk
				r := rec(fmt.Sprint("r", i%50), fmt.Sprint("o", i), 1/3.0+float64(i), t0.Add(time.Duration(i)))
				r.ToOrigin = i%2 == 0
				if i == 7 {
					r.RTTms, r.Up, r.Loss = math.NaN(), false, 0
				}
				batch = append(batch, r)
				want[field(r)] = r
			}
			if err := s.Save(ctx, batch); err != nil {
				t.Fatal(err)
			}
			l, err = s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Records) != len(want) || l.Malformed != 0 {
				t.Fatalf("loaded %d records (%d malformed), want %d", len(l.Records), l.Malformed, len(want))
			}
			for _, r := range l.Records {
				w := want[field(r)]
				if encode(r) != encode(w) || !r.Last.Equal(w.Last) {
					t.Fatalf("read back %+v, wrote %+v", r, w)
				}
			}
			cur := l.Cursor
			if cur != 3000 {
				t.Errorf("cursor after 3000 rows: %d", cur)
			}
			// Two more saves (another writer's): Changes returns them once,
			// in version order, paged.
			a := rec("r1", "o5", 9, t0.Add(time.Hour))
			b := rec("r2", "x", 8, t0.Add(time.Hour))
			s.Save(ctx, []pathcomp.HopRecord{a})
			s.Save(ctx, []pathcomp.HopRecord{b})
			c1, err := s.Changes(ctx, cur, 1)
			if err != nil || len(c1.Records) != 1 || c1.Records[0].To != "o5" || !c1.More {
				t.Fatalf("first page: %+v %v", c1, err)
			}
			c2, err := s.Changes(ctx, c1.Cursor, 10)
			if err != nil || len(c2.Records) != 1 || c2.Records[0].To != "x" || c2.More {
				t.Fatalf("second page: %+v %v", c2, err)
			}
			if c3, _ := s.Changes(ctx, c2.Cursor, 10); len(c3.Records) != 0 || c3.Cursor != c2.Cursor {
				t.Fatalf("nothing new: %+v", c3)
			}
			// Bad rows: skipped and counted, by Load and by Changes.
			for f, v := range map[string]string{
				"nospace":                       "1 0 1 0 1 1764763200000000000",
				"a b":                           "2 0 1 0 1 1764763200000000000",
				"a c":                           "1 0 -5 0 1 1764763200000000000",
				"a d":                           "1 0 1 7 1 1764763200000000000",
				"a e":                           "1 0 NaN 0 1 1764763200000000000",
				"a f":                           "1 0 1 0 1 99",
				"a g":                           "1 2 1 0 1 1764763200000000000",
				"a b;c":                         "1 0 1 0 1 1764763200000000000",
				"a h":                           "1 0 Inf 0 1 1764763200000000000",
				"a " + strings.Repeat("x", 300): "1",
			} {
				put(f, v)
			}
			l, _ = s.Load(ctx)
			if l.Malformed != 10 || len(l.Records) != len(want)+2 || len(l.Errs) == 0 {
				t.Errorf("load with 10 bad rows: %d malformed, %d records (want 10, %d): %v", l.Malformed, len(l.Records), len(want)+2, l.Errs)
			}
			c4, _ := s.Changes(ctx, c2.Cursor, 100)
			if c4.Malformed != 10 || len(c4.Records) != 0 {
				t.Errorf("changes with 10 bad rows: %d malformed, %d records", c4.Malformed, len(c4.Records))
			}
			// Expire: everything older than t0+1000ns, and the bad rows.
			n, err := s.Expire(ctx, t0.Add(1000))
			if err != nil || n != 1000+10 {
				t.Errorf("expired %d (%v), want 1010", n, err)
			}
			l, _ = s.Load(ctx)
			if l.Malformed != 0 || len(l.Records) != len(want)+2-1000 {
				t.Errorf("after expire: %d records, %d malformed", len(l.Records), l.Malformed)
			}
			// Refused writes.
			if err := s.Save(ctx, []pathcomp.HopRecord{{From: "a b", To: "c", Last: t0}}); err == nil {
				t.Error("invalid record saved")
			}
			if err := s.Save(ctx, make([]pathcomp.HopRecord, MaxSave+1)); err == nil {
				t.Error("over MaxSave saved")
			}
		})
	}
}

// TestReplicaFallback runs a real primary and replica (replicaof over
// TCP on 127.0.0.1 with a password): rows written to the primary reach
// the replica, and with the primary stopped Load reads them there.
func TestReplicaFallback(t *testing.T) {
	ctx := context.Background()
	pw := "pathd-test-" + fmt.Sprint(time.Now().UnixNano())
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
	s, err := NewRedis("eu-1", configOf(primary.Config()), []Config{configOf(replica.Config())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recs []pathcomp.HopRecord
	for i := range 100 {
		recs = append(recs, rec("r1", fmt.Sprint("r", i+2), float64(i), t0))
	}
	if err := s.Save(ctx, recs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := rc.Client().HLen(ctx, s.hops).Result()
		if n == 100 {
			break
		}
		if time.Now().After(deadline) {
			info, _ := rc.Client().Info(ctx, "replication").Result()
			t.Fatalf("replica holds %d rows after 10 s: %s", n, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l, err := s.Load(ctx); err != nil || l.From != "primary" || len(l.Records) != 100 {
		t.Fatalf("load with the primary up: from %q, %d records, %v", l.From, len(l.Records), err)
	}
	primary.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Error("ping: primary stopped, still answers")
	}
	l, err := s.Load(ctx)
	if err != nil || l.From != "replica 1" || len(l.Records) != 100 || l.Cursor != 100 {
		t.Fatalf("load with the primary down: from %q, %d records, cursor %d, %v", l.From, len(l.Records), l.Cursor, err)
	}
	// The replica is read-only: a save fails rather than forking the data.
	if err := rc.Client().HSet(ctx, s.hops, "x y", "1").Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("write to the replica: %v, want READONLY", err)
	}
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestChangesAfterDataLoss: a store whose version went back (a Redis
// restarted without persistence) makes Changes read from 0 and say so.
func TestChangesAfterDataLoss(t *testing.T) {
	ctx := context.Background()
	r, srv := bwstoretest.Redis(t)
	rs, err := NewRedis("eu", configOf(srv.Config()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	mem := NewMem()
	for name, c := range map[string]struct {
		s     Store
		flush func()
	}{
		"mem":   {mem, mem.Flush},
		"redis": {rs, func() { r.Client().FlushAll(ctx) }},
	} {
		s := c.s
		var recs []pathcomp.HopRecord
		for i := range 5 {
			recs = append(recs, rec("a", fmt.Sprint("b", i), 1, t0))
		}
		s.Save(ctx, recs)
		l, _ := s.Changes(ctx, 0, 100)
		if l.Cursor != 5 || l.Reset {
			t.Fatalf("%s: %+v", name, l)
		}
		c.flush()
		s.Save(ctx, recs[:2])
		l2, err := s.Changes(ctx, l.Cursor, 100)
		if err != nil || !l2.Reset || len(l2.Records) != 2 || l2.Cursor != 2 {
			t.Errorf("%s: after data loss: %+v %v, want Reset, 2 rows, cursor 2", name, l2, err)
		}
		if l3, _ := s.Changes(ctx, l2.Cursor, 100); l3.Reset || len(l3.Records) != 0 {
			t.Errorf("%s: then: %+v", name, l3)
		}
	}
}
