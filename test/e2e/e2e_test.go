// Package e2e runs azgate end to end in a lab of network namespaces: real
// XDP on veth, the real controller with its embedded etcd, real edge and
// agent processes, real TCP from the Internet namespace.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
)

// TestMain only marks inherited descriptors close-on-exec: whether the lab
// can run is each test's question (labBinary), so that a run without root
// reports every test skipped with its reason rather than "ok" for nothing.
func TestMain(m *testing.M) {
	closeInheritedOnExec()
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	binary    string // azgate, the shipped binary: every role
	labBin    string // azgate-lab: the lab's servers (lab serve)
	buildErr  error
)

// labBinary skips t without root (the lab needs namespaces and XDP) and
// returns the azgate binary the lab runs, built once for the package
// together with azgate-node beside it and azgate-lab (azgateLabBinary).
func labBinary(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab makes network namespaces and attaches XDP")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "azgate-e2e"); buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "azgate")
		labBin = filepath.Join(buildDir, "azgate-lab")
		// azgate-node beside azgate: the lab runs its edges and agents with
		// it (lab.Config.NodeBinary's default), as their units do.
		for _, b := range []struct{ out, tags, pkg string }{
			{binary, "", "../../cmd/azgate"},
			{filepath.Join(buildDir, "azgate-node"), "node", "../../cmd/azgate"},
			{labBin, "", "../../cmd/azgate-lab"},
		} {
			if out, err := exec.Command("go", "build", "-tags", b.tags, "-o", b.out, b.pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build %s: %v\n%s", filepath.Base(b.out), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// azgateLabBinary is labBinary's azgate-lab, beside it: the binary the
// lab runs its servers with (lab.Config.LabBinary).
func azgateLabBinary(t testing.TB) string {
	t.Helper()
	labBinary(t)
	return labBin
}

// closeInheritedOnExec marks the descriptors this process inherited
// close-on-exec. Run as `flock /tmp/azgate-e2e.lock go test ...`, the test
// binary inherits the lock's descriptor, and every lab daemon it starts
// would too: a test binary killed before its cleanup then leaves daemons
// that hold the shared lock until someone downs that lab by hand.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// labCLI runs the azgate CLI against l's controller with the lab's token
// (as an operator would) and returns its output; a failing command fails t.
func labCLI(ctx context.Context, t *testing.T, l *lab.Lab) func(args ...string) string {
	tokenFile := l.Status(ctx).TokenFile
	return func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, labBinary(t), append([]string{"--api", l.API, "--token-file", tokenFile}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("azgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// upLab brings up a lab of its own (prefix aze-) and removes it when the
// test ends, failing the test if anything is left behind.
func upLab(t *testing.T) *lab.Lab { t.Helper(); return upLabWith(t, nil) }

// upLabWith is upLab with changes to the lab's config (set, if not nil,
// may change it).
func upLabWith(t *testing.T, set func(*lab.Config)) *lab.Lab {
	t.Helper()
	cfg := lab.Config{Prefix: "aze-", StateDir: t.TempDir() + "/lab", Binary: labBinary(t), LabBinary: azgateLabBinary(t), Out: testWriter{t}}
	if set != nil {
		set(&cfg)
	}
	lab.Down(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(cfg); err != nil {
			t.Errorf("lab down: %v", err)
		}
		if left, _ := netns.List(cfg.Prefix); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
		if pins, _ := filepath.Glob("/sys/fs/bpf/azgate/" + cfg.Prefix + "*"); len(pins) > 0 {
			t.Errorf("pins left behind: %v", pins)
		}
	})
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

const eip = "198.51.100.7"

func TestEIPLifecycle(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + eip + "/"

	// Unbound: nothing answers.
	if body, err := l.Get(ctx, "inet", url, 500*time.Millisecond); err == nil {
		t.Fatalf("unbound EIP answered %q", body)
	}

	// Bound: a TCP connection from the Internet reaches the guest.
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, url, "hello from az1-h1-g1", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("drift under a stream of requests", func(t *testing.T) {
		checkDrift(t, ctx, l, eip, "az1-h1/g1", "az3-h1", "g1")
	})

	t.Run("too big with DF gets fragmentation needed", func(t *testing.T) {
		mtu, err := pathMTU(l, eip)
		if err != nil {
			t.Fatal(err)
		}
		if mtu != 1500-42 {
			t.Fatalf("path MTU to the EIP %d, want %d (underlay 1500 minus NVGRE's 42)", mtu, 1500-42)
		}
	})

	t.Run("unbind: the EIP stops answering", func(t *testing.T) {
		if _, err := c.UnbindEIP(ctx, eip); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			_, err := l.Get(ctx, "inet", url, 300*time.Millisecond)
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the EIP still answers 3s after unbind")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// And it stays silent.
		time.Sleep(500 * time.Millisecond)
		if body, err := l.Get(ctx, "inet", url, 500*time.Millisecond); err == nil {
			t.Fatalf("unbound EIP answered %q", body)
		}
	})
}

// TestRestartsDoNotInterrupt restarts the edge and an agent while requests
// stream: pinned maps and links keep forwarding without their daemons.
func TestRestartsDoNotInterrupt(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BindEIP(ctx, eip, "az2-h1", "g2"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", "hello from az2-h1-g2", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan []lab.Sample, 1)
	go func() { done <- l.Stream(sctx, "inet", "http://"+eip+"/", 5*time.Millisecond, time.Second) }()
	time.Sleep(time.Second)
	for _, node := range []string{"edge-a1", "az2-h1"} {
		if err := lab.StopRole(l, node); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // forwarding with no daemon at all
		if err := l.StartRole(node); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	stop()
	samples := <-done
	failed := 0
	for _, s := range samples {
		if s.Err != "" {
			failed++
			t.Logf("failed at %v: %s", s.Start.Format("15:04:05.000"), s.Err)
		}
	}
	t.Logf("%d requests across two daemon restarts, %d failed", len(samples), failed)
	if len(samples) < 100 || failed > 0 {
		t.Fatalf("%d requests, %d failed: restarts interrupted forwarding", len(samples), failed)
	}
	// The restarted daemons took over: a new binding is programmed.
	if _, err := c.BindEIP(ctx, eip, "az2-h2", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", "hello from az2-h2-g1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// pathMTU sends a 1500-byte datagram with DF set from the Internet node to
// dst and returns the path MTU the kernel learnt from the ICMP reply.
func pathMTU(l *lab.Lab, dst string) (int, error) {
	n := l.Topo.Node("inet")
	var mtu int
	err := netns.Do(n.Netns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return err
		}
		a, err := netip.ParseAddr(dst)
		if err != nil || !a.Is4() {
			return fmt.Errorf("path MTU to %q: not an IPv4 address", dst)
		}
		sa := &unix.SockaddrInet4{Port: 9, Addr: a.As4()}
		if err := unix.Connect(fd, sa); err != nil {
			return err
		}
		buf := make([]byte, 1500-28)
		for i := 0; i < 20; i++ {
			unix.Write(fd, buf) // EMSGSIZE once the ICMP arrived
			time.Sleep(50 * time.Millisecond)
			if m, err := unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU); err == nil && m < 1500 {
				mtu = m
				return nil
			}
		}
		m, err := unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU)
		mtu = m
		return err
	})
	return mtu, err
}
