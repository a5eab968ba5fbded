package pathcomp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDedupWindow(t *testing.T) {
	d := NewDedup(2)
	step := func(src string, seq uint64, local, wantApply, wantFwd bool) {
		t.Helper()
		a, f, err := d.Decide(ReportID{src, seq}, local)
		if err != nil || a != wantApply || f != wantFwd {
			t.Fatalf("Decide(%s/%d, local=%v) = %v, %v, %v; want %v, %v", src, seq, local, a, f, err, wantApply, wantFwd)
		}
	}
	step("eu/s1", 1, true, true, true)
	step("eu/s1", 1, true, false, false) // retry of a local report
	step("eu/s1", 3, false, true, false) // forwarded: applied, never forwarded again
	step("eu/s1", 2, false, true, false) // late but inside the window
	step("eu/s1", 2, false, false, false)
	step("eu/s1", 3+DedupWindow-1, false, true, false)
	step("eu/s1", 4, false, true, false)  // still inside the window
	step("eu/s1", 3, false, false, false) // slid out of the window: dropped as seen
	step("eu/s1", 10_000, false, true, false)
	step("eu/s1", 4+DedupWindow, false, false, false) // too old
	step("us/s1", 4+DedupWindow, false, true, false)  // sources are independent
	step("eu/s2", 1, false, true, false)              // two sources of eu: the bound of 2 per region
	if _, _, err := d.Decide(ReportID{"eu/s3", 1}, false); !errors.Is(err, ErrTooManySources) {
		t.Fatalf("third source of eu: %v, want ErrTooManySources", err)
	}
	step("ap/s1", 1, false, true, false) // another region's table
	for _, bad := range []ReportID{{"", 1}, {"eu s1", 1}, {"eu/s1", 0}} {
		if _, _, err := d.Decide(bad, true); err == nil {
			t.Fatalf("Decide(%+v): no error", bad)
		}
	}
}

// TestDedupMatchesSet: the window agrees with an unbounded set for every
// sequence inside it, over random arrival orders with duplicates.
func TestDedupMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewDedup(0)
	seen := map[uint64]bool{}
	top := uint64(0)
	for i := 0; i < 200_000; i++ {
		seq := top + 1 - uint64(rng.IntN(int(min(top, 900))+1)) + uint64(rng.IntN(50))
		if seq == 0 {
			seq = 1
		}
		apply, _, err := d.Decide(ReportID{"s", seq}, false)
		if err != nil {
			t.Fatal(err)
		}
		if apply == seen[seq] {
			t.Fatalf("seq %d (top %d): apply %v, seen %v", seq, top, apply, seen[seq])
		}
		seen[seq] = true
		top = max(top, seq)
	}
}

type simRegion struct {
	name  string
	store *Store
	dedup *Dedup
	seq   uint64
	hops  []hopSpec // what this region's probers measure
}

type simMsg struct {
	id ReportID
	m  Measurement
}

// TestCrossRegionConvergence: three regions, each with its own probers,
// forward every local report once to the two others over FIFO links,
// with a third of the forwards delivered twice (retries) and deliveries
// interleaved at random. At the end every region holds the same figures
// for every hop, applied each report exactly once, and the message count
// shows no loop. With flood, every region also re-forwards what it
// received (a buggy forwarder): the seen-set alone must stop the loop.
func TestCrossRegionConvergence(t *testing.T) {
	for _, flood := range []bool{false, true} {
		t.Run(fmt.Sprintf("flood=%v", flood), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			regions := make([]*simRegion, 3)
			for i := range regions {
				r := &simRegion{name: fmt.Sprintf("region%d", i), store: NewStore(Config{}), dedup: NewDedup(0)}
				for j := 0; j < 5; j++ {
					relay := fmt.Sprintf("r%d-%d", i, j)
					r.hops = append(r.hops, hopSpec{relay, fmt.Sprintf("o%d", j), true, time.Duration(10+rng.IntN(90)) * ms, 0},
						hopSpec{"edge", relay, false, time.Duration(5+rng.IntN(50)) * ms, 0})
				}
				regions[i] = r
			}
			var links [3][3][]simMsg // links[from][to], FIFO
			sent, generated := 0, 0
			send := func(from, to int, msg simMsg) {
				links[from][to] = append(links[from][to], msg)
				sent++
			}
			forward := func(from int, msg simMsg) {
				for to := range regions {
					if to == from {
						continue
					}
					send(from, to, msg)
					if rng.Float64() < 1.0/3 {
						send(from, to, msg) // a retry: delivered twice
					}
				}
			}
			receive := func(i int, msg simMsg, local bool) {
				r := regions[i]
				apply, fwd, err := r.dedup.Decide(msg.id, local)
				if err != nil {
					t.Fatal(err)
				}
				if apply {
					if err := r.store.Ingest(msg.m, msg.m.At); err != nil {
						t.Fatalf("%s: %v", r.name, err)
					}
				}
				if fwd || (flood && apply) {
					forward(i, msg)
				}
			}
			deliverSome := func(n int) {
				for k := 0; k < n; k++ {
					var busy [][2]int
					for a := range links {
						for b := range links[a] {
							if len(links[a][b]) > 0 {
								busy = append(busy, [2]int{a, b})
							}
						}
					}
					if len(busy) == 0 {
						return
					}
					l := busy[rng.IntN(len(busy))]
					msg := links[l[0]][l[1]][0]
					links[l[0]][l[1]] = links[l[0]][l[1]][1:]
					receive(l[1], msg, false)
				}
			}
			for round := 0; round < 200; round++ {
				now := t0.Add(time.Duration(round) * 5 * time.Second)
				for i, r := range regions {
					for _, h := range r.hops {
						h.rtt = time.Duration(float64(h.rtt) * (0.9 + 0.2*rng.Float64()))
						h.loss = rng.Float64() * 0.02
						r.seq++
						generated++
						receive(i, simMsg{ReportID{r.name + "/s1", r.seq}, meas(h, now)}, true)
					}
				}
				deliverSome(rng.IntN(40)) // links lag behind by a random amount
			}
			deliverSome(1 << 30)
			end := t0.Add(200 * 5 * time.Second)
			want := sortedHops(regions[0].store.Hops(end))
			for _, r := range regions {
				st := r.store.Stats()
				if st.Applied != uint64(generated) || st.Stale != 0 || st.Rejected != 0 {
					t.Fatalf("%s: stats %+v, want %d applied, none stale", r.name, st, generated)
				}
				if got := sortedHops(r.store.Hops(end)); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s differs from %s:\n%v\n%v", r.name, regions[0].name, got, want)
				}
			}
			// Without flooding each report crosses each of the 6 directed
			// links once, plus retries (a third, on average).
			perReport := float64(sent) / float64(generated)
			t.Logf("%d reports, %d messages (%.2f per report), %d hops agree in 3 regions", generated, sent, perReport, len(want))
			limit := 2 * 4.0 / 3
			if flood {
				limit = 6 * 4.0 / 3 // each region forwards each report at most once to each of 2 others
			}
			if perReport > limit*1.1 {
				t.Fatalf("%.2f messages per report, want at most %.2f: a loop?", perReport, limit)
			}
		})
	}
}

func sortedHops(hs []HopState) map[string]HopState {
	out := make(map[string]HopState, len(hs))
	for _, h := range hs {
		out[h.From+">"+h.To] = h
	}
	return out
}

// TestDedupForget: a forgotten source's IDs are new again and its slot is
// free for another source.
func TestDedupForget(t *testing.T) {
	d := NewDedup(1)
	if apply, _, _ := d.Decide(ReportID{"eu/a", 1}, false); !apply {
		t.Fatal("first report not applied")
	}
	if _, _, err := d.Decide(ReportID{"eu/b", 1}, false); !errors.Is(err, ErrTooManySources) {
		t.Fatalf("second source over the bound of 1: %v", err)
	}
	d.Forget("eu/a")
	if d.Sources() != 0 {
		t.Errorf("%d sources after Forget", d.Sources())
	}
	if apply, _, err := d.Decide(ReportID{"eu/b", 1}, false); !apply || err != nil {
		t.Errorf("eu/b after eu/a was forgotten: %v %v", apply, err)
	}
}

// TestDedupSeqAheadRefused reproduces issue 17 part 3's first attack on
// the core: one report with sequence 2^64−1 of a known source used to
// slide its window to the end, so every later report of the source looked
// too old and was dropped (the source muted while the forger refreshed
// it). Now a sequence more than SeqAhead beyond the highest is refused
// and changes nothing.
func TestDedupSeqAheadRefused(t *testing.T) {
	d := NewDedup(0)
	for seq := uint64(1); seq <= 5; seq++ {
		if apply, _, err := d.Decide(ReportID{"eu/a-1", seq}, false); !apply || err != nil {
			t.Fatalf("seq %d: %v %v", seq, apply, err)
		}
	}
	for _, forged := range []uint64{1<<64 - 1, 5 + SeqAhead + 1} {
		if apply, _, err := d.Decide(ReportID{"eu/a-1", forged}, false); apply || err == nil {
			t.Errorf("forged seq %d: apply %v, err %v; want refused", forged, apply, err)
		} else if !errors.Is(err, ErrSeqAhead) || !strings.Contains(err.Error(), "eu/a-1") {
			t.Errorf("forged seq %d: %v, want ErrSeqAhead naming the source", forged, err)
		}
	}
	// The source is not muted: its next reports are applied, a jump up
	// to the bound too (a peer queue that dropped reports).
	for _, seq := range []uint64{6, 7, 7 + SeqAhead} {
		if apply, _, err := d.Decide(ReportID{"eu/a-1", seq}, false); !apply || err != nil {
			t.Errorf("seq %d after the forgery: apply %v, err %v; want applied", seq, apply, err)
		}
	}
	// A source's first report is taken at any sequence (this server
	// restarted while the sender ran on), and a forgotten source again.
	if apply, _, err := d.Decide(ReportID{"eu/b-1", 1 << 40}, false); !apply || err != nil {
		t.Errorf("first report at 2^40: %v %v", apply, err)
	}
	d.Forget("eu/a-1")
	if apply, _, err := d.Decide(ReportID{"eu/a-1", 1 << 50}, false); !apply || err != nil {
		t.Errorf("forgotten source at 2^50: %v %v", apply, err)
	}
}

// TestDedupTablePerRegion reproduces issue 17 part 3's second attack on
// the core: the sources of one origin region used to fill the one table
// (ErrTooManySources), locking out every other region's new sources. Now
// each origin region has its own table of the bound.
func TestDedupTablePerRegion(t *testing.T) {
	d := NewDedup(4)
	for i := 0; i < 4; i++ {
		if apply, _, err := d.Decide(ReportID{fmt.Sprintf("us/flood-%d", i), 1}, false); !apply || err != nil {
			t.Fatalf("us source %d: %v %v", i, apply, err)
		}
	}
	if _, _, err := d.Decide(ReportID{"us/flood-4", 1}, false); !errors.Is(err, ErrTooManySources) {
		t.Errorf("fifth us source: %v, want ErrTooManySources", err)
	}
	for _, src := range []string{"eu/a-1", "eu/b-1", "ap/a-1"} {
		if apply, _, err := d.Decide(ReportID{src, 1}, false); !apply || err != nil {
			t.Errorf("%s with us's table full: apply %v, err %v; want applied", src, apply, err)
		}
	}
	if d.Sources() != 7 {
		t.Errorf("Sources %d, want 7", d.Sources())
	}
	d.Forget("us/flood-0")
	d.Forget("us/flood-0") // twice: counted once
	if d.Sources() != 6 {
		t.Errorf("Sources %d after Forget, want 6", d.Sources())
	}
	if apply, _, err := d.Decide(ReportID{"us/flood-4", 1}, false); !apply || err != nil {
		t.Errorf("us source after one was forgotten: %v %v", apply, err)
	}
}
