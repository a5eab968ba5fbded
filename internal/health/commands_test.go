package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// testCommands lists commands given as --health-command would take them.
func testCommands(t *testing.T, specs ...string) Commands {
	t.Helper()
	var list []Command
	for _, s := range specs {
		c, err := ParseCommand(s)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, c)
	}
	cmds, err := NewCommands(list)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		spec, err string
		want      Command
	}{
		{spec: "check-dns=/usr/bin/dig +short example.org", want: Command{Name: "check-dns", Path: "/usr/bin/dig", Args: []string{"+short", "example.org"}}},
		{spec: "x=/bin/true", want: Command{Name: "x", Path: "/bin/true", Args: []string{}}},
		{spec: "/bin/true", err: "want NAME=/abs/path"},
		{spec: "Check=/bin/true", err: `name "Check" is not`},
		{spec: strings.Repeat("a", 33) + "=/bin/true", err: "is not 1-32"},
		{spec: "x=", err: "no program"},
		{spec: "x=true", err: "not a clean absolute path"},
		{spec: "x=/bin/../bin/true", err: "not a clean absolute path"},
	} {
		got, err := ParseCommand(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got.Name != tc.want.Name || got.Path != tc.want.Path || strings.Join(got.Args, " ") != strings.Join(tc.want.Args, " ") {
			t.Errorf("%q: %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	if _, err := NewCommands([]Command{{Name: "a", Path: "/bin/true"}, {Name: "a", Path: "/bin/false"}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := NewCommands([]Command{{Name: "a", Path: "/nonexistent/check"}}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing program: %v", err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644)
	if _, err := NewCommands([]Command{{Name: "a", Path: plain}}); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("not executable: %v", err)
	}
}

func TestLoadCommandsFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "commands")
	os.WriteFile(p, []byte("# health commands\n\ncheck-a=/bin/true\n  check-b = /bin/sh -c exit\n"), 0o644)
	list, err := LoadCommandsFile(p)
	if err != nil || len(list) != 2 || list[1].Name != "check-b" || list[1].Path != "/bin/sh" || len(list[1].Args) != 2 {
		t.Fatalf("%+v, %v", list, err)
	}
	os.WriteFile(p, []byte("check-a=/bin/true\nbad line\n"), 0o644)
	if _, err := LoadCommandsFile(p); err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Errorf("bad line: %v, want the file and line", err)
	}
	os.Chmod(p, 0o666)
	if _, err := LoadCommandsFile(p); err == nil || !strings.Contains(err.Error(), "others may change") {
		t.Errorf("world-writable file: %v", err)
	}
}

// TestCommandBounded: a command that prints megabytes is read to its end
// without keeping more than MaxCommandOutput, and one that hangs (with a
// child holding its output open) is killed at the timeout.
func TestCommandBounded(t *testing.T) {
	addr := netip.MustParseAddrPort("192.0.2.10:80")
	loud := Command{Name: "loud", Path: "/bin/sh", Args: []string{"-c", "head -c 8000000 /dev/zero; echo done >&2"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := runCommand(ctx, loud, addr)
	cancel()
	if err != nil {
		t.Fatalf("loud command: %v", err)
	}
	if out.total < 8000000 || len(out.buf) != MaxCommandOutput {
		t.Errorf("read %d bytes, kept %d: want all read, %d kept", out.total, len(out.buf), MaxCommandOutput)
	}

	hang := Command{Name: "hang", Path: "/bin/sh", Args: []string{"-c", "sleep 60 & sleep 60"}}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	_, err = runCommand(ctx, hang, addr)
	cancel()
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("hanging command: %v, want a timeout", err)
	}
	// The timeout plus at most the wait delay for the pipes.
	if took > 300*time.Millisecond+commandWaitDelay+time.Second {
		t.Errorf("hanging command took %v", took)
	}

	// The environment is minimal: nothing of the edge's own leaks in.
	t.Setenv("AZGATE_SECRET", "x")
	env := Command{Name: "env", Path: "/bin/sh", Args: []string{"-c", `test -z "$AZGATE_SECRET" && test "$AZGATE_BACKEND_PORT" = 80 && test "$(pwd)" = /`}}
	if _, err := runCommand(context.Background(), env, addr); err != nil {
		t.Errorf("environment: %v", err)
	}
	if _, err := runCommand(context.Background(), Command{Name: "three", Path: "/bin/sh", Args: []string{"-c", "exit 3"}}, addr); err == nil || err.Error() != "command three exited with status 3" {
		t.Errorf("exit 3: %v", err)
	}
}

// TestManagerCommands: a listed command runs and its verdict is
// published, without its output; an unlisted one is never run and is a
// problem of its service.
func TestManagerCommands(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	pub := &memPub{}
	m := NewManager(t.Context(), pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.SetCommands(testCommands(t, "up=/bin/sh -c echo${IFS}SECRET-OUTPUT;exit${IFS}0", "down=/bin/sh -c echo${IFS}SECRET-OUTPUT;exit${IFS}1"))
	check := func(name string) model.HealthCheck {
		return model.HealthCheck{Type: "command", Command: model.CommandName(name), Interval: model.Duration(100 * time.Millisecond),
			Timeout: model.Duration(50 * time.Millisecond), Rise: 1, Fall: 1}
	}
	a := netip.MustParseAddrPort("192.0.2.10:80")
	m.Update([]Target{
		{Service: "web", Pool: "p", Backend: "192.0.2.10", Addr: a, Check: check("up")},
		{Service: "web", Pool: "q", Backend: "192.0.2.11", Addr: a, Check: check("down")},
		{Service: "db", Pool: "p", Backend: "192.0.2.12", Addr: a, Check: model.HealthCheck{Type: "command", Command: "touch-ran",
			Interval: model.Duration(100 * time.Millisecond), Timeout: model.Duration(50 * time.Millisecond), Rise: 1, Fall: 1}},
	})
	deadline := time.Now().Add(5 * time.Second)
	for len(pub.reports()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ups := map[bool]int{}
	for _, r := range pub.reports() {
		ups[r.Up]++
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), "SECRET-OUTPUT") {
			t.Errorf("a report carries the command's output: %s", b)
		}
		if !r.Up && r.Detail != "command down exited with status 1" {
			t.Errorf("detail %q", r.Detail)
		}
	}
	if ups[true] != 1 || ups[false] != 1 {
		t.Errorf("reports %+v: want one up, one down", pub.reports())
	}
	if m.Targets() != 2 {
		t.Errorf("%d checkers, want 2 (the unlisted command is not run)", m.Targets())
	}
	p := m.Problems()
	if len(p) != 1 || !strings.Contains(p[0], `service db pool p: health check command "touch-ran" is not listed`) {
		t.Errorf("problems %q", p)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the unlisted command ran")
	}
}

// FuzzParseCommand: whatever a --health-command flag or a commands file
// line holds, ParseCommand either refuses it or returns a valid name, a
// clean absolute path and arguments without blanks.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"check-dns=/usr/bin/dig +short example.org", "x=/bin/true", "=", "a=b", "a=/", "A=/x", "a= /x\t-v "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommand(s)
		if err != nil {
			return
		}
		if !model.ValidCommandName(c.Name) || !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path {
			t.Fatalf("%q gave %+v", s, c)
		}
		for _, a := range c.Args {
			if a == "" || strings.ContainsAny(a, " \t\n") {
				t.Fatalf("%q gave argument %q", s, a)
			}
		}
	})
}

// alive says whether the process pid exists and is not a zombie (a
// reparented child that nobody reaps yet is dead for this purpose).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestCommandLeavesNoChildren: a command that starts a child in the
// background and exits 0 passes, and the child (found by the PID the
// script wrote, never by name) does not outlive the run.
func TestCommandLeavesNoChildren(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "bg.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n(sleep 30 >/dev/null 2>&1) &\necho $! > \"$1\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	c := Command{Name: "bg", Path: script, Args: []string{pidFile}}
	if _, err := runCommand(context.Background(), c, netip.MustParseAddrPort("192.0.2.10:80")); err != nil {
		t.Fatalf("the command failed: %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL) // the one this test started
		}
	})
	deadline := time.Now().Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's background child %d is still running after the check", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCommandConcurrencyCap: with 2 command slots and 8 targets whose
// command takes 300 ms, never more than 2 run at once (each run holds a
// file named by its PID while it runs), and all targets get verdicts.
func TestCommandConcurrencyCap(t *testing.T) {
	dir := t.TempDir()
	running := filepath.Join(dir, "running")
	if err := os.Mkdir(running, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "slow.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch \"$1/$$\"\nsleep 0.3\nrm -f \"$1/$$\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pub := &memPub{}
	m := NewManager(t.Context(), pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.SetCommands(testCommands(t, "slow="+script+" "+running))
	m.SetCommandConcurrency(2)
	var targets []Target
	for i := range 8 {
		targets = append(targets, Target{Service: "web", Pool: "p", Backend: fmt.Sprintf("192.0.2.%d", i+1),
			Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 80),
			Check: model.HealthCheck{Type: "command", Command: "slow", Interval: model.Duration(time.Second),
				Timeout: model.Duration(900 * time.Millisecond), Rise: 1, Fall: 1}})
	}
	m.Update(targets)
	most := 0
	deadline := time.Now().Add(10 * time.Second)
	for len(pub.reports()) < len(targets) && time.Now().Before(deadline) {
		es, _ := os.ReadDir(running)
		most = max(most, len(es))
		time.Sleep(5 * time.Millisecond)
	}
	m.Update(nil)
	if most > 2 {
		t.Errorf("%d commands ran at once, want at most 2", most)
	}
	if most == 0 {
		t.Error("never saw a command running")
	}
	if n := len(pub.reports()); n < len(targets) {
		t.Errorf("%d verdicts, want %d", n, len(targets))
	}
	for _, r := range pub.reports() {
		if !r.Up {
			t.Errorf("a verdict is down (%s): waiting for a slot must not count against the timeout", r.Detail)
		}
	}
	if m.CommandWaits() == 0 {
		t.Error("no run waited for a slot")
	}
	t.Logf("at most %d at once; %d runs waited", most, m.CommandWaits())
}

// TestCommandIntervalFloor: a command check below model.MinCommandInterval
// (stored without the API's validation) runs at that minimum.
func TestCommandIntervalFloor(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "count.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho x >> \"$1\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	pub := &memPub{}
	m := NewManager(t.Context(), pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.SetCommands(testCommands(t, "count="+script+" "+runs))
	m.Update([]Target{{Service: "web", Pool: "p", Backend: "192.0.2.1", Addr: netip.MustParseAddrPort("192.0.2.1:80"),
		Check: model.HealthCheck{Type: "command", Command: "count", Interval: model.Duration(100 * time.Millisecond),
			Timeout: model.Duration(50 * time.Millisecond), Rise: 1, Fall: 1}}})
	time.Sleep(1500 * time.Millisecond)
	m.Update(nil)
	b, _ := os.ReadFile(runs)
	if n := strings.Count(string(b), "x"); n < 1 || n > 2 {
		t.Errorf("%d runs in 1.5 s at a 100 ms interval, want 1 or 2 (held to %v)", n, model.MinCommandInterval)
	}
}

// TestCommandOwnership: a program, or a directory above it, that group or
// others may write, or that another user owns, is refused with an error
// naming it; a sticky world-writable directory (like /tmp) is not.
func TestCommandOwnership(t *testing.T) {
	base := t.TempDir()
	write := func(dir string, dirMode, mode os.FileMode) string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "check")
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	load := func(p string) error {
		_, err := NewCommands([]Command{{Name: "check", Path: p}})
		return err
	}
	if err := load(write(filepath.Join(base, "ok"), 0o755, 0o755)); err != nil {
		t.Errorf("0755 program in a 0755 directory: %v", err)
	}
	if err := load(write(filepath.Join(base, "sticky"), 0o777|os.ModeSticky, 0o755)); err != nil {
		t.Errorf("program in a sticky 1777 directory: %v", err)
	}
	p := write(filepath.Join(base, "gw"), 0o755, 0o775)
	if err := load(p); err == nil || !strings.Contains(err.Error(), "program "+p+" has mode 0775") {
		t.Errorf("group-writable program: %v", err)
	}
	d := filepath.Join(base, "open")
	if err := load(write(filepath.Join(d, "sub"), 0o755, 0o755)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	if err := load(filepath.Join(d, "sub", "check")); err == nil || !strings.Contains(err.Error(), "directory "+d+" has mode 0777") {
		t.Errorf("program under a world-writable directory: %v", err)
	}
	// Through a symlink from a safe place to an unsafe one.
	link := filepath.Join(base, "ok", "link")
	if err := os.Symlink(filepath.Join(d, "sub", "check"), link); err != nil {
		t.Fatal(err)
	}
	if err := load(link); err == nil || !strings.Contains(err.Error(), "directory "+d+" has mode 0777") {
		t.Errorf("symlink to a program under a world-writable directory: %v", err)
	}
	// A subtest, so that a run without root counts its skip.
	p = write(filepath.Join(base, "nobody"), 0o755, 0o755)
	t.Run("other owner", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: giving the program another owner needs chown")
		}
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := load(p); err == nil || !strings.Contains(err.Error(), "program "+p+" is owned by uid 65534") {
			t.Errorf("program of another user: %v", err)
		}
	})
}
