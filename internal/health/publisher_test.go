package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

var quiet = slog.New(slog.DiscardHandler)

// etcdClient starts an embedded etcd for the test and returns a client.
func etcdClient(t *testing.T) *clientv3.Client { return embeddedtest.Store(t).Client }

// newPublisher returns a publisher living until the test ends (closed
// before the client is).
func newPublisher(t *testing.T, cli *clientv3.Client, edge string) *StorePublisher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &StorePublisher{Ctx: ctx, Store: &store.Store{Client: cli, Log: quiet}, Edge: edge, TTL: 3 * time.Second, Log: quiet}
	t.Cleanup(func() { cancel(); p.Close() })
	return p
}

type stored struct {
	value string
	lease clientv3.LeaseID
}

// storedReports reads an edge's reports: key (backend) -> value and lease.
func storedReports(t *testing.T, cli *clientv3.Client, edge string) map[string]stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, model.HealthReportEdgePrefix(edge), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stored{}
	for _, kv := range resp.Kvs {
		_, _, _, b, ok := model.ParseHealthReportKey(string(kv.Key))
		if !ok {
			t.Fatalf("bad report key %q", kv.Key)
		}
		out[b] = stored{string(kv.Value), clientv3.LeaseID(kv.Lease)}
	}
	return out
}

func keysOf(m map[string]stored) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// eventually polls f until it holds, failing after 10 s.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaseAlive tells whether etcd still has the lease.
func leaseAlive(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.TTL > 0
}

// publisherGoroutines counts the goroutines running the publisher's code.
func publisherGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		// The keepalive's goroutine runs in the store.
		if strings.Contains(g, "health.(*StorePublisher)") || strings.Contains(g, "store.(*Store).KeepAlive") {
			n++
		}
	}
	return n
}

// countingPub counts the verdicts the manager hands to the publisher.
type countingPub struct {
	*StorePublisher
	n atomic.Int64
}

func (c *countingPub) Publish(ctx context.Context, t Target, r model.HealthReport) error {
	c.n.Add(1)
	return c.StorePublisher.Publish(ctx, t, r)
}

// listenTCP accepts (and closes) connections until the test ends.
func listenTCP(t *testing.T) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}

func tcpTarget(t *testing.T, backend, addr string) Target {
	return Target{Service: "s", Pool: "p", Backend: backend, Addr: addrOf(t, addr),
		Check: model.HealthCheck{Type: "tcp", Interval: model.Duration(50 * time.Millisecond), Timeout: model.Duration(25 * time.Millisecond), Rise: 1, Fall: 1}}
}

// TestPublisherRepublishesAfterLeaseLoss: when the lease goes (revoked
// under the publisher's feet here), every current verdict is written
// again with a new lease, promptly, though no verdict changed.
func TestPublisherRepublishesAfterLeaseLoss(t *testing.T) {
	cli := etcdClient(t)
	pub := &countingPub{StorePublisher: newPublisher(t, cli, "e1")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, pub, quiet)
	up := listenTCP(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := l.Addr().String()
	l.Close()
	m.Update([]Target{tcpTarget(t, "up", up.String()), tcpTarget(t, "down", refused)})

	var before map[string]stored
	eventually(t, "both verdicts are stored", func() bool {
		before = storedReports(t, cli, "e1")
		return len(before) == 2
	})
	var r model.HealthReport
	if err := json.Unmarshal([]byte(before["up"].value), &r); err != nil || !r.Up {
		t.Fatalf("up backend's report %q (%v)", before["up"].value, err)
	}
	if err := json.Unmarshal([]byte(before["down"].value), &r); err != nil || r.Up {
		t.Fatalf("down backend's report %q (%v)", before["down"].value, err)
	}
	oldLease := before["up"].lease
	if oldLease == 0 || before["down"].lease != oldLease {
		t.Fatalf("reports not on one lease: %+v", before)
	}
	published := pub.n.Load()

	if _, err := cli.Revoke(context.Background(), oldLease); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the verdicts are stored again with a new lease", func() bool {
		after := storedReports(t, cli, "e1")
		if len(after) != 2 {
			return false
		}
		for k, s := range after {
			if s.lease == oldLease || s.lease == 0 || s.value != before[k].value {
				return false
			}
		}
		return true
	})
	if n := pub.n.Load(); n != published {
		t.Fatalf("the manager published %d more verdicts: the publisher alone must restore them", n-published)
	}

	// And a second time: the new lease is watched as well.
	cur := storedReports(t, cli, "e1")["up"].lease
	if _, err := cli.Revoke(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the verdicts are stored again after a second loss", func() bool {
		after := storedReports(t, cli, "e1")
		return len(after) == 2 && after["up"].lease != cur && after["down"].lease != cur && after["up"].lease != 0
	})
}

// TestPublisherRevokesReplacedLease: a lease given up while etcd still
// has it (its keepalive ended) is revoked once the reports are on the new
// one, so nothing written with it lingers for a TTL.
func TestPublisherRevokesReplacedLease(t *testing.T) {
	cli := etcdClient(t)
	p := newPublisher(t, cli, "e1")
	p.TTL = time.Minute // longer than the wait: only a revocation ends the lease in time
	ctx := context.Background()
	tg := Target{Service: "s", Pool: "p", Backend: "b"}
	if err := p.Publish(ctx, tg, model.HealthReport{Up: false, Detail: "refused"}); err != nil {
		t.Fatal(err)
	}
	first := storedReports(t, cli, "e1")["b"].lease
	if first == 0 {
		t.Fatal("no report stored")
	}
	// A report of an earlier run that lingers on the lease.
	stale := model.HealthReportKey("e1", "s", "p", "stale")
	if _, err := cli.Put(ctx, stale, `{"up":false}`, clientv3.WithLease(first)); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	stop := p.kaStop
	p.mu.Unlock()
	stop() // the keepalive ends as on a partition longer than the TTL

	eventually(t, "the report is on a new lease and the old lease revoked", func() bool {
		got := storedReports(t, cli, "e1")
		return len(got) == 1 && got["b"].lease != first && got["b"].lease != 0 && !leaseAlive(t, cli, first)
	})
	if _, ok := storedReports(t, cli, "e1")["stale"]; ok {
		t.Fatal("the stale report survived the revocation")
	}
}

// TestPublisherRemoveDeletesKey: a target the manager stops checking has
// its report deleted at once; the others stay.
func TestPublisherRemoveDeletesKey(t *testing.T) {
	cli := etcdClient(t)
	p := newPublisher(t, cli, "e1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, p, quiet)
	a, b := tcpTarget(t, "a", listenTCP(t).String()), tcpTarget(t, "b", listenTCP(t).String())
	m.Update([]Target{a, b})
	eventually(t, "both verdicts are stored", func() bool { return len(storedReports(t, cli, "e1")) == 2 })
	lease := storedReports(t, cli, "e1")["a"].lease

	m.Update([]Target{a})
	eventually(t, "b's report is deleted", func() bool {
		got := storedReports(t, cli, "e1")
		return slices.Equal(keysOf(got), []string{"a"})
	})
	if !leaseAlive(t, cli, lease) {
		t.Fatal("removing a target cost the lease")
	}
	// Changing a target's check keeps its report until the new verdict.
	a2 := a
	a2.Check.Path = "/changed"
	m.Update([]Target{a2})
	if got := storedReports(t, cli, "e1"); !slices.Equal(keysOf(got), []string{"a"}) {
		t.Fatalf("after a change of check: %v", keysOf(got))
	}

	// The publisher alone: Remove of what was never published is a no-op,
	// of what was, a delete.
	p.Remove(Target{Service: "s", Pool: "p", Backend: "never"})
	// A stopped checker's late Publish (its context ended before Update
	// removed it) stores nothing.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := p.Publish(done, b, model.HealthReport{Up: true}); err == nil {
		t.Fatal("Publish with an ended context succeeded")
	}
	m.Update(nil)
	eventually(t, "every report is deleted", func() bool { return len(storedReports(t, cli, "e1")) == 0 })
}

// TestManagerStopRemovesReports: when the manager's context ends, its
// targets' reports are deleted though the publisher lives on.
func TestManagerStopRemovesReports(t *testing.T) {
	cli := etcdClient(t)
	p := newPublisher(t, cli, "e1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, p, quiet)
	m.Update([]Target{tcpTarget(t, "a", listenTCP(t).String()), tcpTarget(t, "b", listenTCP(t).String())})
	eventually(t, "both verdicts are stored", func() bool { return len(storedReports(t, cli, "e1")) == 2 })
	lease := storedReports(t, cli, "e1")["a"].lease
	cancel()
	eventually(t, "the reports are deleted", func() bool { return len(storedReports(t, cli, "e1")) == 0 })
	eventually(t, "the checkers are stopped", func() bool { return m.Targets() == 0 })
	m.Update([]Target{tcpTarget(t, "c", listenTCP(t).String())})
	if m.Targets() != 0 {
		t.Fatal("a stopped manager started a checker")
	}
	if !leaseAlive(t, cli, lease) {
		t.Fatal("the publisher's lease went with the manager")
	}
}

// TestPublisherStopRevokes: ending the publisher's context revokes its
// lease (deleting every report at once) and ends its goroutines,
// keepalive included; Close does it synchronously.
func TestPublisherStopRevokes(t *testing.T) {
	cli := etcdClient(t)
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			edge := "e-" + how
			p := &StorePublisher{Ctx: ctx, Store: &store.Store{Client: cli, Log: quiet}, Edge: edge, TTL: 3 * time.Second, Log: quiet}
			for i := range 3 {
				if err := p.Publish(ctx, Target{Service: "s", Pool: "p", Backend: fmt.Sprint("b", i)}, model.HealthReport{Up: i%2 == 0}); err != nil {
					t.Fatal(err)
				}
			}
			got := storedReports(t, cli, edge)
			if len(got) != 3 {
				t.Fatalf("stored %v", keysOf(got))
			}
			lease := got["b0"].lease
			eventually(t, "the loop and the keepalive's goroutine run", func() bool { return publisherGoroutines() == 2 })
			switch how {
			case "cancel":
				cancel()
				select {
				case <-p.done:
				case <-time.After(10 * time.Second):
					t.Fatal("the publisher did not stop")
				}
			case "close":
				p.Close()
			}
			if got := storedReports(t, cli, edge); len(got) != 0 {
				t.Fatalf("after stopping: %v", keysOf(got))
			}
			if leaseAlive(t, cli, lease) {
				t.Fatal("the lease outlived the publisher")
			}
			eventually(t, "the publisher's goroutines end", func() bool { return publisherGoroutines() == 0 })
			err := p.Publish(context.Background(), Target{Service: "s", Pool: "p", Backend: "late"}, model.HealthReport{Up: true})
			if !errors.Is(err, ErrPublisherStopped) {
				t.Fatalf("Publish after stop: %v", err)
			}
			p.Remove(Target{Service: "s", Pool: "p", Backend: "b0"}) // no effect, no block
			p.Close()                                                // again: returns
		})
	}
}

// TestPublisherConcurrent: Publish and Remove from many goroutines (run
// with -race); the store ends up with exactly the last state.
func TestPublisherConcurrent(t *testing.T) {
	cli := etcdClient(t)
	p := newPublisher(t, cli, "e1")
	ctx := context.Background()
	target := func(i int) Target { return Target{Service: "s", Pool: "p", Backend: fmt.Sprint("b", i)} }
	const workers, rounds, targets = 8, 30, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				i := (w + r) % targets
				if (w+r)%3 == 0 {
					p.Remove(target(i))
				} else if err := p.Publish(ctx, target(i), model.HealthReport{Up: r%2 == 0, Detail: fmt.Sprint(w, r)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The final word: even targets up, odd ones removed.
	for i := range targets {
		if i%2 == 0 {
			if err := p.Publish(ctx, target(i), model.HealthReport{Up: true, Detail: "final"}); err != nil {
				t.Fatal(err)
			}
		} else {
			p.Remove(target(i))
		}
	}
	eventually(t, "the store holds the final state", func() bool {
		got := storedReports(t, cli, "e1")
		if len(got) != targets/2 {
			return false
		}
		for k, s := range got {
			var r model.HealthReport
			if json.Unmarshal([]byte(s.value), &r) != nil || !r.Up || r.Detail != "final" {
				t.Fatalf("%s: %s", k, s.value)
			}
		}
		return true
	})
}
