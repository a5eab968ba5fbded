package store

import (
	"context"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// gcPercent reads the GC percent (debug.SetGCPercent returns the old one).
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// gcSink notes the GC percent at each Put and Commit of a follower.
type gcSink struct {
	mu      sync.Mutex
	puts    []int // the percent at each Put
	commits []int // at each Commit
	resyncs []bool
	done    chan struct{} // a commit arrived
}

func (g *gcSink) Reset() {}
func (g *gcSink) Put(kind, key string, value []byte, rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.puts = append(g.puts, gcPercent())
}
func (g *gcSink) Delete(kind, key string, rev int64) {}
func (g *gcSink) Commit(rev int64, resync bool) {
	g.mu.Lock()
	g.commits, g.resyncs = append(g.commits, gcPercent()), append(g.resyncs, resync)
	g.mu.Unlock()
	select {
	case g.done <- struct{}{}:
	default:
	}
}

// A follower with LoadGCPercent runs its full load, and the commit that
// applies it, at that GC percent and puts the process's back after it:
// a change it watches later is applied at the percent the process had.
func TestLoadGCPercent(t *testing.T) {
	t.Setenv("GOGC", "") // an operator's GOGC would win
	s := embedded(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rev, err := s.Commit(ctx, 0, put(t, eips(50)...))
	if err != nil {
		t.Fatal(err)
	}
	s.loadPageBytes = 2048 // several pages
	s.LoadGCPercent = 17
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	sink := &gcSink{done: make(chan struct{}, 1)}
	followed := make(chan struct{})
	go func() { defer close(followed); s.FollowSink(ctx, sink) }()
	wait := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			sink.mu.Lock()
			got := len(sink.commits)
			sink.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d commits after 30 s, want %d", got, n)
			}
			select {
			case <-sink.done:
			case <-time.After(time.Second):
			}
		}
	}
	wait(1)
	if _, err := s.Commit(ctx, rev, put(t, eips(51)[50])); err != nil {
		t.Fatal(err)
	}
	wait(2)
	cancel()
	<-followed
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.puts) < 50 {
		t.Fatalf("%d puts, want the 50 loaded and the watched one", len(sink.puts))
	}
	for i, p := range sink.puts[:50] {
		if p != 17 {
			t.Fatalf("put %d of the full load at GC percent %d, want LoadGCPercent 17", i, p)
		}
	}
	if !sink.resyncs[0] || sink.commits[0] != 17 {
		t.Errorf("the load's commit (resync %v) at GC percent %d, want 17", sink.resyncs[0], sink.commits[0])
	}
	if last := sink.commits[len(sink.commits)-1]; last != 150 || sink.puts[len(sink.puts)-1] != 150 {
		t.Errorf("the watched change applied at GC percent %d (put %d), want the process's 150 back", last, sink.puts[len(sink.puts)-1])
	}
	if got := gcPercent(); got != 150 {
		t.Errorf("GC percent %d after the follow, want 150", got)
	}

	// An operator's GOGC wins: the percent is left alone.
	t.Setenv("GOGC", "150")
	if restore := s.lowerGC(); gcPercent() != 150 {
		t.Errorf("GOGC set: lowered to %d", gcPercent())
	} else {
		restore()
	}
}

// Overlapping loads share one lowering: the last one out restores.
func TestLoadGCPercentOverlap(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(120)
	defer debug.SetGCPercent(before)
	a, b := &Store{LoadGCPercent: 30}, &Store{LoadGCPercent: 30}
	ra := a.lowerGC()
	rb := b.lowerGC()
	ra()
	if got := gcPercent(); got != 30 {
		t.Errorf("one load still running: GC percent %d, want 30", got)
	}
	rb()
	if got := gcPercent(); got != 120 {
		t.Errorf("no load running: GC percent %d, want 120 back", got)
	}
}
