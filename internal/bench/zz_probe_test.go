package bench

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

func TestZZProbeFloor(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip("probe")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	frame := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, 128)
	rep := 2_000_000
	for round := 0; round < 3; round++ {
		for _, p := range []struct {
			n string
			p *ebpf.Program
		}{{"pass", b.Pass()}, {"floor", b.Floor()}, {"calls4", b.Calls4()}} {
			ns, _, err := env.Time(p.p, dptest.ExtDev, frame, uint32(rep))
			if err != nil {
				t.Fatal(err)
			}
			_, d, err := p.p.Benchmark(frame, rep, nil)
			if err != nil {
				t.Fatal(err)
			}
			// pinned benchmark in host ns
			runtime.LockOSThread()
			var old, one unix.CPUSet
			unix.SchedGetaffinity(0, &old)
			one.Set(1)
			unix.SchedSetaffinity(0, &one)
			_, d2, _ := p.p.Benchmark(frame, rep, nil)
			unix.SchedSetaffinity(0, &old)
			runtime.UnlockOSThread()
			t.Logf("%s: env.Time(ctx ifindex, netns)=%.1f  Benchmark(no ctx)=%d  pinned cpu1=%d", p.n, ns, d.Nanoseconds(), d2.Nanoseconds())
		}
	}
}

func TestZZProbeLong(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip("probe")
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	frame := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, 128)
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(1)
	unix.SchedSetaffinity(0, &one)
	for i := 0; i < 10; i++ {
		_, d, err := b.Pass().Benchmark(frame, 20_000_000, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pass %d", d.Nanoseconds())
	}
}

func TestZZProbeHold(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip("probe")
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	os.WriteFile("/tmp/probe/ready", nil, 0o644)
	for i := 0; i < 300; i++ {
		if _, err := os.Stat("/tmp/probe/done"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestZZVerifierStats(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip("probe")
	}
	for _, f := range []string{"../dataplane/edge_bpfel.o", "../dataplane/agent_bpfel.o", os.Getenv("BASEDIR") + "/edge_bpfel.o"} {
		spec, err := ebpf.LoadCollectionSpec(f)
		if err != nil {
			t.Log(err)
			continue
		}
		for _, m := range spec.Maps {
			m.Pinning = 0
		}
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range coll.Programs {
			info, _ := p.Info()
			insns, _ := info.Instructions()
			log := p.VerifierLog
			if i := strings.Index(log, "processed"); i >= 0 {
				log = log[i:]
			}
			t.Logf("%s %s: xlated %d insns; %s", f, name, len(insns), strings.TrimSpace(log))
		}
		coll.Close()
	}
}

func TestZZRepeats(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip("probe")
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	frame := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, 128)
	for r := 0; r < 3; r++ {
		for _, rep := range []int{10_000, 100_000, 2_000_000, 20_000_000} {
			_, d, _ := b.Pass().Benchmark(frame, rep, nil)
			t.Logf("repeat %d: %d ns", rep, d.Nanoseconds())
		}
	}
}
