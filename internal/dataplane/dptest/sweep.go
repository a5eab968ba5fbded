package dptest

import (
	"os"
	"regexp"
	"strconv"
	"sync"

	"github.com/azgate/azgate/internal/netns"
)

// bedName matches a test bed's namespaces: azgt-PID-SEQ{n,p}, PID the
// creating process's pid modulo 100000 (New).
var bedName = regexp.MustCompile(`^azgt-([0-9]{1,5})-[0-9]+[np]$`)

var sweepOnce sync.Once

// sweepDead removes the test beds a test process left behind when it was
// killed before its cleanup ran (Close never ran: SIGKILL, a timeout's
// panic in another goroutine): the namespaces whose creating process no
// longer runs. A bed is another process's only while a process with a pid
// of the same residue runs; any such process keeps it (a reused residue
// only delays the sweep to a later run).
func sweepDead() {
	names, err := netns.List("azgt-")
	if err != nil {
		return
	}
	live := liveResidues()
	if live == nil {
		return
	}
	for _, n := range deadBeds(names, live) {
		_ = netns.Delete(n)
	}
}

// deadBeds are the names of beds whose creator's residue is not live.
func deadBeds(names []string, live map[int]bool) []string {
	var out []string
	for _, n := range names {
		m := bedName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		if p, err := strconv.Atoi(m[1]); err == nil && !live[p] {
			out = append(out, n)
		}
	}
	return out
}

// liveResidues are the running processes' pids modulo 100000 (nil if
// /proc cannot be read: then nothing is swept).
func liveResidues() map[int]bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	live := map[int]bool{}
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			live[p%100000] = true
		}
	}
	if !live[os.Getpid()%100000] {
		return nil // not the /proc of this pid namespace
	}
	return live
}
