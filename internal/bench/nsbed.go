package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/bpfemu"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// The per-packet suites (dataplane, lb) time programs with
// BPF_PROG_TEST_RUN repeat mode in a dptest bed and share this accounting.
//
// Harness: the kernel's test loop costs something per run whatever the
// program does; an XDP_PASS program measures it (on AMD EPYC VMs with the
// SRSO "Safe RET" mitigation about 22 ns, on Intel Xeon VMs about 5: see
// BENCHMARKS.md). Floor: MAC swap + XDP_TX. Every path's figure includes
// the harness once, as the floor does, so AboveFloor = path - floor is the
// path's own cost beyond the least useful program.
//
// Paths that move headers or need a distinct flow per run are timed
// through xdp_chain (bpf/bench.c), which restores the frame, optionally
// rewrites the client, and tail-calls the program's real entry point; the
// same chain into xdp_pass is measured next to each and taken out:
// figure = chain(path) - chain(pass) + pass - (one head adjustment if the
// path moves headers, half of xdp_adjust2 - xdp_pass).

// side is one version of the programs under test: this build's, or an
// earlier version's objects (--baseline-objects).
type side struct {
	name  string // "" for this build, "before" for the baseline
	progs map[string]*ebpf.Program
	// maps and compiled instructions of each program (by progs key), for
	// the instruction count
	maps  map[string]map[string]*ebpf.Map
	specs map[string]*ebpf.ProgramSpec
	edge  *dataplane.Edge // the load-balancer suite's, for its hooks
	close []func() error
}

func (s *side) Close() {
	for i := len(s.close) - 1; i >= 0; i-- {
		s.close[i]()
	}
}

// nsCase is one path to time.
type nsCase struct {
	name   string
	prog   string // key in side.progs
	dev    string // the interface the frame arrives on
	frame  []byte
	action uint32
	chain  bool // through xdp_chain
	moves  bool // the path moves headers: one head adjustment is taken out
	vary   bool // a distinct client every run (chain only)
	repeat int  // runs per timing when not the suite's
	// before and after run around each timing of the case on a side
	// (after gets the runs the chain counted).
	before func(s *side) error
	after  func(s *side, runs uint64) error
	note   string
	target string
	// cur: timed and counted on this build's objects only (a path the
	// baseline objects do not have, such as the agent's IPv6 EIPs).
	cur bool
	// uncounted, when set, is why the case has no instruction count
	// (bpfemu cannot replay one of its helpers).
	uncounted string
	// twin names the IPv4 case an IPv6 case mirrors: a row after the
	// case's compares their costs above the floor (issue 21: IPv6 within
	// 10 % of IPv4), when both were timed.
	twin string
}

// XDP actions.
const (
	actDrop     = 1
	actPass     = 2
	actTX       = 3
	actRedirect = 4
)

type nsBed struct {
	suite  string
	only   string        // time only the cases whose name contains it (profiling)
	soak   time.Duration // then run them alone this long (for perf), untimed
	lines  string        // with soak: write the soaked programs' JIT line table here
	env    *dptest.Env
	b      *dataplane.Bench
	repeat int
	s      map[string][]float64 // samples by key
}

func newNSBed(env *dptest.Env, b *dataplane.Bench, repeat int) *nsBed {
	return &nsBed{env: env, b: b, repeat: repeat, s: map[string][]float64{}}
}

func (n *nsBed) add(key string, v float64) { n.s[key] = append(n.s[key], v) }
func (n *nsBed) min(key string) float64    { return minOf(n.s[key]) }

// calibrate times xdp_pass, the floor, xdp_adjust2 and xdp_calls4 once.
func (n *nsBed) calibrate(frame []byte) error {
	for _, c := range []struct {
		key  string
		prog *ebpf.Program
		want uint32
	}{{"pass", n.b.Pass(), actPass}, {"floor", n.b.Floor(), actTX}, {"adjust2", n.b.Adjust2(), actTX}, {"calls4", n.b.Calls4(), actPass}} {
		v, err := timeProg(n.env, c.prog, dptest.ExtDev, frame, n.repeat, c.want)
		if err != nil {
			return fmt.Errorf("%s: %w", c.key, err)
		}
		n.add(c.key, v)
	}
	return nil
}

// timeCase times c once on side s, and for chained cases the chain into
// xdp_pass with the same frame and variation.
func (n *nsBed) timeCase(s *side, c nsCase) error {
	if c.cur && s.name != "" {
		return nil
	}
	prog := s.progs[c.prog]
	if prog == nil {
		return fmt.Errorf("%s: no program %s in the %s objects", c.name, c.prog, sideName(s))
	}
	if c.before != nil {
		if err := c.before(s); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	key := s.name + "/" + c.name
	repeat := n.repeat
	if c.repeat > 0 {
		repeat = min(repeat, c.repeat)
	}
	if !c.chain {
		v, err := timeProg(n.env, prog, c.dev, c.frame, repeat, c.action)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", c.name, sideName(s), err)
		}
		n.add(key, v)
		return nil
	}
	if err := n.b.SetBenchFrame(c.frame); err != nil {
		return err
	}
	for _, t := range []struct {
		key  string
		prog *ebpf.Program
		want uint32
	}{{key + "/cal", n.b.Pass(), actPass}, {key, prog, c.action}} {
		if err := n.b.SetChainTarget(t.prog); err != nil {
			return err
		}
		if err := n.b.SetVary(c.vary); err != nil {
			return err
		}
		v, err := timeProg(n.env, n.b.Chain(), c.dev, c.frame, repeat, t.want)
		if err != nil {
			return fmt.Errorf("%s (%s, chained): %w", c.name, sideName(s), err)
		}
		n.add(t.key, v)
		if t.key == key && c.after != nil {
			runs, err := n.b.VaryRuns()
			if err != nil {
				return err
			}
			if err := c.after(s, runs); err != nil {
				return fmt.Errorf("%s (%s): %w", c.name, sideName(s), err)
			}
		}
	}
	return n.b.SetVary(false)
}

// soakCase runs c alone for n.soak, nothing else in between but its hooks,
// so a profiler sampling the CPU sees the path and the harness only.
func (n *nsBed) soakCase(s *side, c nsCase) error {
	prog := s.progs[c.prog]
	if n.lines != "" {
		if err := writeJITLines(n.lines, prog); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "soak: %s alone for %s\n", c.name, n.soak)
	if c.chain {
		if err := n.b.SetBenchFrame(c.frame); err != nil {
			return err
		}
		if err := n.b.SetChainTarget(prog); err != nil {
			return err
		}
		prog = n.b.Chain()
	}
	repeat := n.repeat
	if c.repeat > 0 {
		repeat = min(repeat, c.repeat)
	}
	for end := time.Now().Add(n.soak); time.Now().Before(end); {
		if c.before != nil {
			if err := c.before(s); err != nil {
				return err
			}
		}
		if err := n.b.SetVary(c.vary); err != nil {
			return err
		}
		if _, err := timeProg(n.env, prog, c.dev, c.frame, repeat, c.action); err != nil {
			return err
		}
		if c.after != nil {
			runs, err := n.b.VaryRuns()
			if err != nil {
				return err
			}
			if err := c.after(s, runs); err != nil {
				return err
			}
		}
	}
	return n.b.SetVary(false)
}

// firstCPU is the CPU the timings run on (dptest pins them to the first
// CPU the process may use).
func firstCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			return c
		}
	}
	return 0
}

func sideName(s *side) string {
	if s.name == "" {
		return "this version's"
	}
	return "baseline"
}

// value is a case's figure on a side (see the package comment above).
func (n *nsBed) value(s *side, c nsCase) float64 {
	key := s.name + "/" + c.name
	v := n.min(key)
	if c.chain {
		v += n.min("pass") - n.min(key+"/cal")
		if c.moves {
			v -= n.adjust()
		}
	}
	return v
}

func (n *nsBed) adjust() float64 { return max(n.min("adjust2")-n.min("pass"), 0) / 2 }

// run times every case on every side, rounds times, interleaved, and
// returns the harness, floor and call figures followed by every case.
func (n *nsBed) run(suite string, rounds int, sides []*side, cases []nsCase) ([]Result, error) {
	n.suite = suite
	if n.only != "" {
		var keep []nsCase
		for _, c := range cases {
			if strings.Contains(c.name, n.only) {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("no %s path matches %q", suite, n.only)
		}
		cases = keep
	}
	for r := 0; r < rounds; r++ {
		if err := n.calibrate(cases[0].frame); err != nil {
			return nil, err
		}
		for _, c := range cases {
			for i, s := range sides {
				if c.cur && i > 0 {
					break
				}
				if err := n.timeCase(s, c); err != nil {
					return nil, err
				}
			}
		}
	}
	if n.soak > 0 {
		for _, c := range cases {
			if err := n.soakCase(sides[0], c); err != nil {
				return nil, err
			}
		}
	}
	counts, err := n.countCases(sides, cases)
	if err != nil {
		return nil, err
	}
	pass, floor := n.min("pass"), n.min("floor")
	pp := func(r Result) Result {
		r.Suite, r.Unit, r.PerPacket, r.Harness, r.Floor, r.AboveFloor = suite, "ns/packet", true, pass, floor, r.Value-floor
		return r
	}
	out := []Result{
		pp(Result{Name: "xdp_pass (harness: the test loop alone)", Value: pass}),
		pp(Result{Name: "xdp_floor (MAC swap, XDP_TX)", Value: floor}),
		{Suite: suite, Name: "call_return (one call and return of a BPF function)", Value: (n.min("calls4") - pass) / 4, Unit: "ns",
			Note: "(xdp_calls4 - xdp_pass) / 4; every helper call of a path pays it once more"},
	}
	timed := map[string]nsCase{}
	for _, c := range cases {
		timed[c.name] = c
	}
	for _, c := range cases {
		v := n.value(sides[0], c)
		r := pp(Result{Name: c.name, Value: v, Baseline: "xdp_floor", BaselineValue: floor, Ratio: v / floor, Note: c.note, Target: c.target})
		if len(sides) > 1 && !c.cur {
			b := n.value(sides[1], c)
			r.HasBefore, r.Before, r.BeforeAboveFloor = true, b, b-floor
		}
		out = append(out, r)
		if t, ok := timed[c.twin]; ok && c.twin != "" {
			out = append(out, twinResult(suite, c, r.AboveFloor, n.value(sides[0], t)-floor))
		}
	}
	return append(out, counts...), nil
}

// twinResult compares an IPv6 case's cost above the floor (v6) with its
// IPv4 twin's (v4), both of this build: Ratio = v6 / v4.
func twinResult(suite string, c nsCase, v6, v4 float64) Result {
	return Result{Suite: suite, Name: "v6_vs_v4 " + c.name, Value: v6, Unit: "ns above the floor",
		Baseline: c.twin, BaselineValue: v4, Ratio: ratio(v6, v4), Target: "<= 1.10 (IPv6 within 10 % of IPv4 above the floor)",
		Note: fmt.Sprintf("%+.0f %% against %s above the floor", 100*(ratio(v6, v4)-1), c.twin)}
}

// countCases replays each case's program once on its frame (bpfemu.Replay)
// and checks the replay against a real run of the same frame; the result
// is the instructions the path executes, as compiled, and its calls.
func (n *nsBed) countCases(sides []*side, cases []nsCase) ([]Result, error) {
	var out []Result
	for _, c := range cases {
		var counts []bpfemu.Count
		for i, s := range sides {
			if c.cur && i > 0 || c.uncounted != "" {
				break
			}
			spec := s.specs[c.prog]
			if spec == nil {
				break
			}
			if c.before != nil {
				if err := c.before(s); err != nil {
					return nil, err
				}
			}
			idx, err := n.env.Node.Ifindex(c.dev)
			if err != nil {
				return nil, err
			}
			// A real run first, so the per-CPU next-hop cache is as
			// the timings had it (its entries expire); a new flow's
			// entry goes again.
			if _, err := n.env.Run(s.progs[c.prog], c.dev, c.frame); err != nil {
				return nil, err
			}
			if c.vary && s.edge != nil {
				if err := s.edge.DeleteFlowOf(c.frame); err != nil {
					return nil, err
				}
			}
			jiffies, err := n.b.Jiffies()
			if err != nil {
				return nil, err
			}
			got, err := bpfemu.Replay(spec, bpfemu.Env{Maps: s.maps[c.prog], CPU: firstCPU(), Ifindex: uint32(idx), Jiffies: jiffies, Lines: os.Getenv("AZGATE_INSNS_LINES") != ""}, c.frame)
			if dir := os.Getenv("AZGATE_INSNS_LINES"); dir != "" && err == nil {
				// Where the path's instructions are (BENCHMARKS.md):
				// one file per path and side, "count function:
				// file:line source" a line.
				var b strings.Builder
				for k, v := range got.Lines {
					fmt.Fprintf(&b, "%5d %s\n", v, k)
				}
				name := strings.Fields(c.name)[0] + "." + strings.Fields(sideName(s))[0]
				if werr := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); werr != nil {
					return nil, werr
				}
			}
			if err != nil {
				return nil, fmt.Errorf("instruction count of %s (%s): %w", c.name, sideName(s), err)
			}
			want, err := n.env.Run(s.progs[c.prog], c.dev, c.frame)
			if err != nil {
				return nil, err
			}
			if c.vary && s.edge != nil {
				if err := s.edge.DeleteFlowOf(c.frame); err != nil {
					return nil, err
				}
			}
			if c.after != nil {
				if err := c.after(s, 0); err != nil {
					return nil, err
				}
			}
			if got.Action != want.Action || !bytes.Equal(got.Out, want.Out) {
				return nil, fmt.Errorf("instruction count of %s (%s): the replay ends with action %d and %d bytes, the kernel with %d and %d bytes",
					c.name, sideName(s), got.Action, len(got.Out), want.Action, len(want.Out))
			}
			counts = append(counts, got)
		}
		if len(counts) == 0 {
			continue
		}
		r := Result{Suite: n.suite, Name: "insns " + c.name, Value: float64(counts[0].Insns), Unit: "BPF insns",
			Note: "executed by one packet, as compiled (before the verifier's rewrites): " + counts[0].String()}
		if len(counts) > 1 {
			r.HasBefore, r.Before = true, float64(counts[1].Insns)
			if b := counts[1].String(); b != counts[0].String() {
				r.Note += "; before: " + b
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// baselineFiles finds the edge and agent objects of an earlier version in
// dir (the committed internal/dataplane/*_bpfel.o, e.g. extracted with
// `git archive REV internal/dataplane | tar -x -C DIR --strip-components=2`
// or scripts/baseline-objects.sh).
func baselineFiles(dir string) (edge, agent string, err error) {
	edge, agent = filepath.Join(dir, "edge_bpfel.o"), filepath.Join(dir, "agent_bpfel.o")
	for _, f := range []string{edge, agent} {
		if _, err := os.Stat(f); err != nil {
			return "", "", fmt.Errorf("baseline objects: %w", err)
		}
	}
	return edge, agent, nil
}

// guardMissing turns a panic in setting up a baseline side (a map this
// version fills that the old object lacks: a nil *ebpf.Map) into an error
// naming what is missing.
func guardMissing(missing dataplane.Missing, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("baseline objects lack %v, which this version's setup fills (%v): "+
			"compare with the earlier version's own binary instead", missing, r)
	}
}

// writeJITLines writes, for prog and the functions JITed with it, one line
// per BTF line record: the JITed address (hex), file:line and the source
// text, so a profiler's sample addresses map to source lines
// (scripts/profile-path.sh).
func writeJITLines(path string, prog *ebpf.Program) error {
	info, err := prog.Info()
	if err != nil {
		return err
	}
	lines, err := info.LineInfos()
	if err != nil {
		return fmt.Errorf("line info of %s: %w", prog, err)
	}
	addrs, ok := info.JitedLineInfos()
	if !ok || len(addrs) != len(lines) {
		return fmt.Errorf("JIT line info of %s: %d addresses for %d lines", prog, len(addrs), len(lines))
	}
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "%x\t%s:%d\t%s\n", addrs[i], filepath.Base(l.Line.FileName()), l.Line.LineNumber(),
			strings.Join(strings.Fields(l.Line.Line()), " "))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
