package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The bandwidth buckets' clock (bpf/lib/bw.h, bw_now): jiffies times the
// tick in ns, less a base, read inline by the programs where
// bpf_ktime_get_ns was a helper call (~35 ns per limited packet on the
// bench VM: BENCHMARKS.md, "Bandwidth limits"). The programs learn the
// tick and the base as read-only globals set here at load time; without
// them (0: a tick this code refuses) they use bpf_ktime_get_ns.

// bwClockParams are the values of bw_tick_ns and bw_clock_base.
type bwClockParams struct {
	Tick uint64 // ns per jiffy (TICK_NSEC); 0: the programs use bpf_ktime_get_ns
	Base uint64 // jiffies × Tick at CLOCK_MONOTONIC's zero
}

// bwClock is this kernel's bucket clock, found once per process.
var bwClock = sync.OnceValue(func() bwClockParams {
	tick, err := bwTickNs()
	if err != nil {
		return bwClockParams{}
	}
	return bwClockParams{Tick: tick, Base: bwClockBase(tick)}
})

// bwTickNs is the kernel's tick in ns: the resolution of
// CLOCK_MONOTONIC_COARSE, which the kernel reports as TICK_NSEC (the ns
// one jiffy stands for). Ticks outside 1-10 ms (HZ 100-1000) are refused:
// the programs then keep the fine clock.
func bwTickNs() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("bandwidth clock: resolution of CLOCK_MONOTONIC_COARSE: %w", err)
	}
	tick := time.Duration(ts.Nano())
	if tick < time.Millisecond || tick > 10*time.Millisecond {
		return 0, fmt.Errorf("bandwidth clock: a tick of %v (want 1-10 ms)", tick)
	}
	return uint64(tick), nil
}

// bwClockBase is jiffies × tick at CLOCK_MONOTONIC's zero, so that the
// buckets' clock reads CLOCK_MONOTONIC to within a tick or two and a
// bucket's TAT (pinned: it survives a program upgrade) means the same on
// either clock. Measured from /proc/timer_list (root), which prints
// CLOCK_MONOTONIC ("now at") and jiffies; the jiffies then lag
// CLOCK_MONOTONIC by how long the boot took to start the tick (0.25 s on
// the bench VM). Without it: the kernel's start value, INITIAL_JIFFIES
// (2^32 - 300 × HZ on 64-bit kernels), which leaves that lag in.
func bwClockBase(tick uint64) uint64 {
	if b, ok := bwClockBaseMeasured(tick); ok {
		return b
	}
	hz := (uint64(time.Second) + tick/2) / tick
	return (1<<32 - 300*hz) * tick
}

// bwClockBaseMeasured reads jiffies and CLOCK_MONOTONIC from
// /proc/timer_list. The base never exceeds jiffies × tick, so the
// programs' subtraction cannot wrap.
func bwClockBaseMeasured(tick uint64) (uint64, bool) {
	f, err := os.Open("/proc/timer_list")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var now, jiffies uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	for sc.Scan() && (now == 0 || jiffies == 0) {
		line := bytes.TrimSpace(sc.Bytes())
		switch {
		case now == 0 && bytes.HasPrefix(line, []byte("now at ")):
			now, _ = strconv.ParseUint(strings.TrimSuffix(string(line[len("now at "):]), " nsecs"), 10, 64)
		case jiffies == 0 && bytes.HasPrefix(line, []byte("jiffies: ")):
			jiffies, _ = strconv.ParseUint(string(line[len("jiffies: "):]), 10, 64)
		}
	}
	if now == 0 || jiffies == 0 || jiffies > ^uint64(0)/tick || jiffies*tick < now {
		return 0, false
	}
	return jiffies*tick - now, true
}

// setBwClock writes the bucket clock into spec's read-only globals (an
// earlier version's object without them is left as it is).
func setBwClock(spec *ebpf.CollectionSpec) error {
	c := bwClock()
	for name, v := range map[string]uint64{"bw_tick_ns": c.Tick, "bw_clock_base": c.Base} {
		if vs := spec.Variables[name]; vs != nil {
			if err := vs.Set(v); err != nil {
				return fmt.Errorf("bandwidth clock: set %s: %w", name, err)
			}
		}
	}
	return nil
}
