//go:build !node

package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// TestMain lets a test run this test binary as the azgate command itself
// (startRole): the real process, its exit status and its log.
func TestMain(m *testing.M) {
	if os.Getenv("AZGATE_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{"azgate"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// role is a started azgate process; done is closed when it exited.
type role struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startRole starts `azgate ARGS...` as a process with extra environment.
func startRole(t *testing.T, env []string, args ...string) (*role, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "AZGATE_TEST_AS_MAIN=1"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return &role{cmd, done}, &out
}

// waitExit waits at most bound for the process to exit and returns its
// exit code.
func waitExit(t *testing.T, r *role, out *bytes.Buffer, bound time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(bound):
		t.Fatalf("still running %v later: it hangs\n%s", bound, out)
		return 0
	}
}

// TestRoleStartFailure: every role given a configuration that cannot
// work exits non-zero within a bound, its log naming the cause (issue
// 17.4). The failures come late where the role allows it (after its
// store or data plane started), where a hang would show.
func TestRoleStartFailure(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-token")
	noEtcd := "unix://" + filepath.Join(dir, "no-etcd.sock")
	pins := func(n string) string {
		return filepath.Join("/sys/fs/bpf", fmt.Sprintf("azgt-start-%s-%d", n, os.Getpid()))
	}
	for _, c := range []struct {
		role  string
		root  bool
		args  []string
		cause string
	}{
		{"controller", false, []string{"controller", "--data-dir", filepath.Join(dir, "ctl"), "--listen", taken.Addr().String()},
			"listen on " + taken.Addr().String()},
		{"edge", true, []string{"edge", "--name", "edge-x1", "--etcd-endpoints", noEtcd, "--pin-dir", pins("edge"),
			"--attach", "azgtnosuch0", "--icmp-source", "192.0.2.1", "--metrics-listen", ""}, "azgtnosuch0"},
		{"edge metrics token", false, []string{"edge", "--name", "edge-x1", "--etcd-endpoints", noEtcd,
			"--attach", "azgtnosuch0", "--metrics-token-file", missing}, "missing-token"},
		{"agent", true, []string{"agent", "--name", "h-x1", "--etcd-endpoints", noEtcd, "--pin-dir", pins("agent"),
			"--underlay-if", "azgtnosuch0", "--metrics-listen", ""}, "azgtnosuch0"},
		{"bwmgr", false, []string{"bwmgr", "--name", "bw-x1", "--etcd-endpoints", noEtcd, "--scope", "region",
			"--region-store", "mem:", "--metrics-token-file", missing}, "missing-token"},
		{"gslb", false, []string{"gslb", "--etcd-endpoints", noEtcd, "--listen", taken.Addr().String(), "--metrics-listen", ""}, taken.Addr().String()},
		{"pathd", false, []string{"pathd", "--listen", "127.0.0.1:0", "--region", "r1", "--token-file", missing, "--peer-token-file", missing}, "missing-token"},
		{"prober", false, []string{"prober", "--token-file", missing}, "missing-token"},
		{"announce", false, []string{"announce", "--vip", "198.51.100.1/32", "--asn", "64512", "--peer", "127.0.0.1",
			"--next-hop", "127.0.0.1", "--check", "http://127.0.0.1:1/", "--status-listen", taken.Addr().String()},
			taken.Addr().String()},
	} {
		t.Run(c.role, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root: loads the XDP data plane")
			}
			if c.root {
				t.Cleanup(func() { dataplane.RemovePins(c.args[6]) }) // --pin-dir
			}
			cmd, out := startRole(t, nil, c.args...)
			if code := waitExit(t, cmd, out, time.Minute); code == 0 {
				t.Fatalf("exit status 0, want non-zero\n%s", out)
			}
			if !strings.Contains(out.String(), c.cause) {
				t.Fatalf("the log does not name the cause %q:\n%s", c.cause, out)
			}
			t.Logf("%v:\n%s", cmd.cmd.ProcessState, lastLines(out.String(), 3))
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestControllerNotify: the controller process tells systemd READY=1
// once its store is loaded and its API listens (the API answers by
// then), STOPPING=1 on SIGTERM, and exits 0.
func TestControllerNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func(bound time.Duration) (string, error) {
		c.SetReadDeadline(time.Now().Add(bound))
		b := make([]byte, 4096)
		n, err := c.Read(b)
		return string(b[:n]), err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd, out := startRole(t, []string{"NOTIFY_SOCKET=" + sock}, "controller", "--data-dir", t.TempDir(), "--listen", addr)
	got, err := read(time.Minute)
	if err != nil || got != "READY=1" {
		t.Fatalf("got %q, %v, want READY=1\n%s", got, err, out)
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("READY=1 but the API does not listen: %v", err)
	}
	conn.Close()
	cmd.cmd.Process.Signal(syscall.SIGTERM)
	if got, err = read(30 * time.Second); err != nil || got != "STOPPING=1" {
		t.Fatalf("got %q, %v, want STOPPING=1\n%s", got, err, out)
	}
	if code := waitExit(t, cmd, out, time.Minute); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, out)
	}
}
