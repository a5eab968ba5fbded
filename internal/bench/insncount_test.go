package bench

import (
	"bytes"
	"os"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestReplayMatchesKernel: the replay of the edge on the encap, pass and
// load-balancer frames ends with the action and the bytes the kernel's run
// of the same frame gives.
func TestReplayMatchesKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	s, err := dataplaneSide(env, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	specs, err := dataplane.ProgramSpecs()
	if err != nil {
		t.Fatal(err)
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	j, err := b.Jiffies()
	if err != nil {
		t.Fatal(err)
	}
	inet := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, 128)
	idx, _ := env.Node.Ifindex(dptest.ExtDev)
	// Warm the next-hop cache with a real run first.
	want, err := env.Run(s.progs["edge"], dptest.ExtDev, inet)
	if err != nil {
		t.Fatal(err)
	}
	got, err := countInsns(specs["xdp_edge"], emuEnv{maps: s.maps["edge"], cpu: firstCPU(), ifindex: uint32(idx), jiffies: j}, inet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("edge encap: %v", got)
	if got.Action != want.Action || !bytes.Equal(got.Out, want.Out[:len(got.Out)]) {
		t.Errorf("replay: action %d, %x\nkernel: action %d, %x", got.Action, got.Out, want.Action, want.Out)
	}

	// Not an EIP: the pass path reads the global hc_address (.bss) too.
	pass := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, "198.51.100.250", 40000, 80, 128)
	want, err = env.Run(s.progs["edge"], dptest.ExtDev, pass)
	if err != nil {
		t.Fatal(err)
	}
	got, err = countInsns(specs["xdp_edge"], emuEnv{maps: s.maps["edge"], cpu: firstCPU(), ifindex: uint32(idx), jiffies: j}, pass)
	if err != nil {
		t.Fatalf("edge pass: %v", err)
	}
	if got.Action != want.Action {
		t.Errorf("edge pass: replay action %d, kernel %d", got.Action, want.Action)
	}
}
