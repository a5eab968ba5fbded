package dataplane

import "testing"

// TestEdgeProgramSize logs what the verifier processed for xdp_edge and the
// program's translated and JIT-compiled sizes (run with -v): a change to the
// packet paths should not grow the hit path, and these figures show it.
func TestEdgeProgramSize(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	info, err := e.Program().Info()
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
	t.Logf("xdp_edge: verifier processed %d instructions; translated %d B (%d insns); JIT %d B", verified, xlated, xlated/8, jited)
	if verified == 0 || xlated == 0 {
		t.Fatal("no program statistics")
	}
}
