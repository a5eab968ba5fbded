package dataplane

import (
	"testing"

	"github.com/cilium/ebpf"
)

// compiledMax is each XDP program's size as compiled (instructions of the
// program and the functions it calls, before the verifier's rewrites) at
// the last change of bpf/: a change that grows one must raise its figure
// here, on purpose, with the per-packet counts of `azgate bench dataplane`
// and `azgate bench lb` in its commit message.
var compiledMax = map[string]int{
	"xdp_edge":           16004,
	"xdp_agent_underlay": 4516,
	"xdp_agent_guest":    5869,
}

// TestCompiledProgramSize holds the committed objects' programs to
// compiledMax (no kernel needed).
func TestCompiledProgramSize(t *testing.T) {
	specs, err := ProgramSpecs()
	if err != nil {
		t.Fatal(err)
	}
	for name, max := range compiledMax {
		p := specs[name]
		if p == nil {
			t.Errorf("%s: not in the objects", name)
			continue
		}
		n := len(p.Instructions)
		t.Logf("%s: %d instructions compiled (at most %d)", name, n, max)
		if n > max {
			t.Errorf("%s: %d instructions compiled, more than the %d of progsize_test.go's compiledMax", name, n, max)
		}
	}
}

// logProgramSize logs what the verifier processed for prog and the
// program's translated and JIT-compiled sizes (run with -v): a change to
// the packet paths should not grow the hit path, and these figures show it.
func logProgramSize(t *testing.T, name string, prog *ebpf.Program) {
	t.Helper()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	verified, _ := info.VerifiedInstructions()
	xlated, err := info.TranslatedSize()
	if err != nil {
		t.Fatal(err)
	}
	jited, err := info.JitedSize()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: verifier processed %d instructions; translated %d B (%d insns); JIT %d B", name, verified, xlated, xlated/8, jited)
	if verified == 0 || xlated == 0 {
		t.Fatalf("%s: no program statistics", name)
	}
}

// TestEdgeProgramSize logs xdp_edge's figures (logProgramSize).
func TestEdgeProgramSize(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	logProgramSize(t, "xdp_edge", e.Program())
}

// TestAgentProgramSize logs the agent programs' figures (logProgramSize).
func TestAgentProgramSize(t *testing.T) {
	requireRoot(t)
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	logProgramSize(t, "xdp_agent_underlay", a.UnderlayProgram())
	logProgramSize(t, "xdp_agent_guest", a.GuestProgram())
}
