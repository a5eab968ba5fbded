package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/netns"
)

// TestBWServersStartAndStop: the lab's bandwidth stores start one per
// zone through bwstore.StartServer (an AZ's in its first host's
// namespace, the edges' and the region's in this one), each answers with
// the password in its password file (0600, in a 0700 directory), and
// stopBWServers ends exactly them by PID and removes their directories;
// KillBWManager and stopBWManagers end a process whose command line is a
// manager's of this lab, and never signal a PID that is not one (this
// test's own, a sleep given as a manager).
func TestBWServersStartAndStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, redis-server in one")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		// Root and no binary is a broken setup, not a reason to skip (as
		// bwstoretest.Redis and the etcd tests do).
		t.Fatal("no redis-server binary: scripts/setup.sh installs it (apt-get install redis-server)")
	}
	const prefix = "azgt-lbw-"
	cfg := Config{Prefix: prefix, StateDir: t.TempDir(), AZs: 1, HostsPerAZ: 1, GuestsPerHost: 1}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	l := &Lab{Cfg: cfg, Topo: Build(prefix, 1, 1, 1)}
	ns := l.Topo.Node(HostName(1, 1)).Netns
	netns.Delete(ns)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	if err := os.MkdirAll(l.logDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers, err := l.startBWServers(ctx)
	t.Cleanup(func() { stopBWServers(cfg.StateDir) })
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 3 {
		t.Fatalf("%d servers, want az1, edge and region", len(servers))
	}
	for _, s := range servers {
		wantNS := ""
		if s.Zone == "az1" {
			wantNS = ns
		}
		if s.Netns != wantNS {
			t.Errorf("%s: netns %q, want %q", s.Zone, s.Netns, wantNS)
		}
		if got, want := netInode(t, fmt.Sprintf("/proc/%d/ns/net", s.PID)), netInode(t, nsPathOr(wantNS)); got != want {
			t.Errorf("%s: pid %d runs in net namespace %d, want %d (%q)", s.Zone, s.PID, got, want, wantNS)
		}
		for path, mode := range map[string]os.FileMode{s.Dir: 0o700 | os.ModeDir, s.PasswordFile: 0o600} {
			if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
				t.Errorf("%s: %s: mode %v (%v), want %v", s.Zone, path, fi.Mode(), err, mode)
			}
		}
		st, err := l.BWStore(s.Zone)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadReports(ctx, s.Zone); err != nil {
			t.Errorf("%s: the store does not answer with the password file's password: %v", s.Zone, err)
		}
		st.Close()
		if args := l.bwRoleArgs(&Node{Role: "host", AZ: "az1"}); s.Zone == "az1" && strings.Join(args, " ") != "--bw-store "+s.URL()+" --bw-store-password-file "+s.PasswordFile {
			t.Errorf("agent flags %q", args)
		}
	}
	if args := l.bwRoleArgs(&Node{Role: "edge"}); !strings.HasSuffix(strings.Join(args, " "), "--bw-zone edge") {
		t.Errorf("edge flags %q", args)
	}
	// A process that is not a manager of this lab, recorded as one, is
	// left alone; so is this test.
	sl := exec.Command("sleep", "30")
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	defer sl.Process.Kill()
	// Two that look like this lab's managers (a command line naming
	// bwmgr and a path in the state directory: tail -f run as "bwmgr")
	// are stopped, one by KillBWManager, one by stopBWManagers.
	fakeLog := filepath.Join(cfg.StateDir, "fake-bwmgr.log")
	if err := os.WriteFile(fakeLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tail, err := exec.LookPath("tail")
	if err != nil {
		t.Fatal(err)
	}
	var fakes []int
	for range 2 {
		c := &exec.Cmd{Path: tail, Args: []string{"bwmgr", "-f", fakeLog}}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Process.Kill()
		go c.Wait()
		fakes = append(fakes, c.Process.Pid)
	}
	l.bw.Managers = []BWManager{{Name: "region-1", Scope: "region", PID: sl.Process.Pid}, {Name: "region-2", Scope: "region", PID: os.Getpid()},
		{Name: "zone-az1", Scope: "az", Zone: "az1", PID: fakes[0]}, {Name: "zone-edge", Scope: "az", Zone: "edge", PID: fakes[1]}}
	if err := l.saveBW(); err != nil {
		t.Fatal(err)
	}
	if err := l.KillBWManager("region-1", syscall.SIGKILL); err == nil {
		t.Error("KillBWManager signalled a process that is not a bandwidth manager")
	}
	if err := l.KillBWManager("zone-az1", syscall.SIGTERM); err != nil || alive(fakes[0]) {
		t.Errorf("KillBWManager zone-az1 (pid %d): %v, still running: %v", fakes[0], err, alive(fakes[0]))
	}
	if err := stopBWManagers(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	if !alive(sl.Process.Pid) {
		t.Error("stopBWManagers killed a process that is not a bandwidth manager")
	}
	if alive(fakes[1]) {
		t.Errorf("stopBWManagers left the manager zone-edge (pid %d) running", fakes[1])
	}
	if err := stopBWServers(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if alive(s.PID) {
			t.Errorf("%s: redis-server %d still runs", s.Zone, s.PID)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "bw")); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", filepath.Join(cfg.StateDir, "bw"), err)
	}
	// Again: nothing to do, no error.
	if err := errors.Join(stopBWManagers(cfg.StateDir), stopBWServers(cfg.StateDir)); err != nil {
		t.Errorf("a second stop: %v", err)
	}
}

func nsPathOr(name string) string {
	if name == "" {
		return "/proc/self/ns/net"
	}
	return netns.Path(name)
}

func netInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestStartLoadRefusesBadEIP: a target address that is not IPv4 is
// refused, naming it, before any socket opens (net.ParseIP's nil would
// dial inet's own loopback: a load that never crosses the gateway); so
// is a negative number of flows (the sender would divide by zero).
func TestStartLoadRefusesBadEIP(t *testing.T) {
	l := &Lab{Topo: Build("azgt-lld-", 1, 1, 1)}
	for _, eip := range []string{"", "198.51.100", "2001:db8::7", "127.0.0.1", "0.0.0.0"} {
		ld, err := l.StartLoad([]LoadTarget{{EIP: eip, Guest: "az1-h1-g1", Rate: 1e6}})
		if err == nil {
			ld.Stop()
			t.Errorf("EIP %q: accepted", eip)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", eip)) {
			t.Errorf("EIP %q: error %q does not name it", eip, err)
		}
	}
	if _, err := l.StartLoad([]LoadTarget{{EIP: "198.51.100.7", Guest: "az1-h1-g1", Flows: -1}}); err == nil {
		t.Error("-1 flows: accepted")
	}
}
