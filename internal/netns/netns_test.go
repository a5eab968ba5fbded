package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSurvivesIPNetnsAdd: with a namespace of ours up, `ip netns add` of
// another name (which makes Dir a mount point if it is not one) must leave
// ours deletable, and a namespace mounted before Dir was a mount point
// (by an older version, here by unshare(1)) must be deletable too. It runs
// in a private mount namespace of its own (a re-exec under unshare(1)),
// starting from a Dir that is not a mount point, so the machine's mounts
// are never changed.
func TestSurvivesIPNetnsAdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts, namespaces)")
	}
	if os.Getenv("AZG_NETNS_PRIVATE") == "" {
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0], "-test.run", "^TestSurvivesIPNetnsAdd$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "AZG_NETNS_PRIVATE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a private mount namespace:\n%s", out)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return
	}
	// Start as a machine where nobody has run `ip netns add` yet.
	for isMountPoint(t, Dir) {
		if err := unix.Unmount(Dir, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
	}
	pfx := fmt.Sprintf("azgt-nsshare-%d-", os.Getpid())
	old, ours, theirs := pfx+"old", pfx+"ours", pfx+"theirs"
	defer func() {
		exec.Command("ip", "netns", "del", theirs).Run()
		Delete(ours)
		Delete(old)
	}()
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A namespace mounted the way this package did before (no shared Dir).
	if err := os.WriteFile(Path(old), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "--net="+Path(old), "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare --net: %v: %s", err, out)
	}
	if err := Create(ours); err != nil {
		t.Fatal(err)
	}
	if !isMountPoint(t, Dir) {
		t.Errorf("%s is not a mount point after Create", Dir)
	}
	if out, err := exec.Command("ip", "netns", "add", theirs).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	for _, n := range []string{old, ours, theirs} {
		if !Exists(n) {
			t.Errorf("namespace %s does not exist", n)
		}
	}
	if err := Delete(ours); err != nil {
		t.Errorf("Delete %s after ip netns add: %v", ours, err)
	}
	if err := Delete(old); err != nil {
		t.Errorf("Delete %s (mounted before %s was shared): %v", old, Dir, err)
	}
	if out, err := exec.Command("ip", "netns", "del", theirs).CombinedOutput(); err != nil {
		t.Errorf("ip netns del: %v: %s", err, out)
	}
	for _, n := range []string{old, ours, theirs} {
		if _, err := os.Stat(Path(n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after deletion (%v)", Path(n), err)
		}
	}
}

// isMountPoint reports whether dir is a mount point (in /proc/self/mountinfo).
func isMountPoint(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
