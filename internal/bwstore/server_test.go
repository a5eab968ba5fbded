package bwstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestServerLockedDown checks who can reach the test's redis-server: the
// socket's directory is 0700 and the socket 0700, there is no TCP listener,
// a client without the password is refused, protected-mode is on.
func TestServerLockedDown(t *testing.T) {
	srv := startRedis(t)
	dir := srv.Socket[:strings.LastIndexByte(srv.Socket, '/')]
	for _, p := range []string{dir, srv.Socket} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s: mode %v, reachable by others", p, m)
		}
	}
	if st, _ := os.Stat(dir + "/redis.conf"); st.Mode().Perm() != 0o600 {
		t.Errorf("redis.conf (holds the password): mode %v", st.Mode().Perm())
	}
	cmdline, _ := os.ReadFile("/proc/" + itoa(srv.PID) + "/cmdline")
	if strings.Contains(string(cmdline), srv.Password) {
		t.Error("password on the command line")
	}
	ctx := context.Background()
	anon := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Socket, DisableIdentity: true, Protocol: 2, MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("ping without password: %v, want NOAUTH", err)
	}
	bad, _ := NewRedis(RedisConfig{Network: "unix", Addr: srv.Socket, Password: "wrong"})
	defer bad.Close()
	if err := bad.Ping(ctx); err == nil {
		t.Error("wrong password accepted")
	}
	r, err := NewRedis(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for k, want := range map[string]string{"port": "0", "protected-mode": "yes", "unixsocketperm": "700", "save": "", "maxmemory-policy": "noeviction"} {
		v, err := r.Client().ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if v[k] != want {
			t.Errorf("config %s = %q, want %q", k, v[k], want)
		}
	}
	// No TCP socket of the server's in its network namespace.
	// ss failing is a failure too, not a pass: the check would be gone.
	if out, err := exec.Command("ss", "-Hltnp").Output(); err != nil {
		t.Errorf("ss -Hltnp (iproute2): %v", err)
	} else if strings.Contains(string(out), "pid="+itoa(srv.PID)+",") {
		t.Errorf("redis-server listens on TCP: %s", out)
	}
	// Stop ends exactly this PID.
	srv.Stop()
	if err := syscall.Kill(srv.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("redis-server %d still there after Stop: %v", srv.PID, err)
	}
}

// TestServerDirRefused: StartServer refuses a Dir someone else could
// change under it (their directory, a symlink, a parent others may write or
// own), before it writes the config there.
func TestServerDirRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: hands directories to uid 65534")
	}
	base, err := os.MkdirTemp("", "azgbw-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirs := mk(base+"/theirs", 0o700, 65534)
	mine := mk(base+"/mine", 0o700, 0)
	link := base + "/link"
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	open := mk(base+"/open", 0o777, 0)
	sticky := mk(base+"/sticky", 0o777|os.ModeSticky, 0)
	foreign := mk(base+"/foreign", 0o755, 65534)
	for _, tc := range []struct{ dir, want string }{
		{theirs, "owned by uid 65534, not this process's"},
		{link, "not a directory (a symlink?)"},
		{open + "/s", "parent " + open + " has mode 0777"},
		{foreign + "/s", "parent " + foreign + " is owned by uid 65534"},
	} {
		_, err := StartServer(context.Background(), ServerConfig{Dir: tc.dir, Binary: "/bin/false"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dir %s: %v, want %q", tc.dir, err, tc.want)
		}
		if _, err := os.Lstat(tc.dir + "/redis.conf"); err == nil {
			t.Errorf("dir %s: redis.conf written before the refusal", tc.dir)
		}
	}
	// A fresh directory in a sticky, world-writable parent (as /tmp) is ours.
	if err := checkServerDir(mk(sticky+"/s", 0o700, 0)); err != nil {
		t.Errorf("own dir under a sticky parent: %v", err)
	}
}

// TestServerInNetns starts the server in a namespace of the test's own, as
// the lab does for each AZ, and checks the process is in it; then one on
// the namespace's loopback and a replica of that one (ReplicaOf).
func TestServerInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	needServer(t)
	b := make([]byte, 4)
	rand.Read(b)
	ns := "azgt-bws-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	dir, err := os.MkdirTemp("", "azgbw-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := StartServer(context.Background(), ServerConfig{Dir: dir, Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	var want, got syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &want); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/proc/"+itoa(srv.PID)+"/ns/net", &got); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Ino {
		t.Errorf("redis-server %d is not in namespace %s", srv.PID, ns)
	}
	r, _ := NewRedis(srv.Config())
	defer r.Close()
	if err := r.WriteReports(context.Background(), "az1", "h1", 1e9, nil); err != nil {
		t.Error(err)
	}

	// With TCP, the listener is in the namespace only (its loopback here),
	// and wildcards are refused.
	for _, bad := range []string{"0.0.0.0:6390", "[::]:6390", "127.0.0.1", "localhost:6390", "127.0.0.1:0"} {
		if _, err := StartServer(context.Background(), ServerConfig{Dir: dir + "-bad", Netns: ns, TCP: bad}); err == nil {
			t.Errorf("tcp %q accepted", bad)
		}
	}
	exec.Command("ip", "-n", ns, "link", "set", "lo", "up").Run()
	dir2, _ := os.MkdirTemp("", "azgbw-")
	defer os.RemoveAll(dir2)
	srv2, err := StartServer(context.Background(), ServerConfig{Dir: dir2, Netns: ns, TCP: "127.0.0.1:6390"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop()
	in, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltnp").Output()
	if !strings.Contains(string(in), "127.0.0.1:6390") || !strings.Contains(string(in), "pid="+itoa(srv2.PID)+",") {
		t.Errorf("no listener on 127.0.0.1:6390 in %s: %s", ns, in)
	}
	out, _ := exec.Command("ss", "-Hltnp").Output()
	if strings.Contains(string(out), "pid="+itoa(srv2.PID)+",") {
		t.Errorf("redis-server %d listens outside its namespace: %s", srv2.PID, out)
	}

	// A replica of srv2 (the GSLB lab's pathd clusters): it follows the
	// primary with the primary's password and refuses writes.
	dir3, _ := os.MkdirTemp("", "azgbw-")
	defer os.RemoveAll(dir3)
	for _, bad := range []ServerConfig{
		{Dir: dir3, Netns: ns, ReplicaOf: "127.0.0.1", PrimaryPassword: srv2.Password},
		{Dir: dir3, Netns: ns, ReplicaOf: "127.0.0.1:6390"},
		{Dir: dir3, Netns: ns, ReplicaOf: "127.0.0.1:6390", PrimaryPassword: "a b"},
	} {
		if _, err := StartServer(context.Background(), bad); err == nil {
			t.Errorf("replica config %+v accepted", bad)
		}
	}
	srv3, err := StartServer(context.Background(), ServerConfig{Dir: dir3, Netns: ns, ReplicaOf: "127.0.0.1:6390", PrimaryPassword: srv2.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer srv3.Stop()
	p, _ := NewRedis(srv2.Config())
	defer p.Close()
	rep, _ := NewRedis(srv3.Config())
	defer rep.Close()
	ctx := context.Background()
	if err := p.Client().Set(ctx, "azgt-replica", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := rep.Client().Get(ctx, "azgt-replica").Result()
		if err == nil && v == "v1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica has %q (%v) 10 s after the primary's write, want v1", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := rep.Client().Set(ctx, "azgt-replica", "v2", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("a write to the replica: %v, want READONLY", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestRedisCallTimeout freezes the server (SIGSTOP to its PID) and checks
// every call gives up after the call timeout with an error naming what
// failed, then works again once the server runs.
func TestRedisCallTimeout(t *testing.T) {
	srv := startRedis(t)
	cfg := srv.Config()
	cfg.CallTimeout = 200 * time.Millisecond
	r, err := NewRedis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.WriteReports(ctx, "az1", "h1", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(srv.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(srv.PID, syscall.SIGCONT)
	calls := map[string]func() error{
		"write report of h1": func() error { return r.WriteReports(ctx, "az1", "h1", time.Second, nil) },
		"reporters of az1":   func() error { _, err := r.ReadReports(ctx, "az1"); return err },
		"write limits of h1": func() error { return r.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: 1}) },
		"read limits of h1":  func() error { _, _, err := r.ReadLimits(ctx, "az1", "h1"); return err },
		"generation of h1":   func() error { _, _, err := r.LimitsGeneration(ctx, "az1", "h1"); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if took := time.Since(start); err == nil || took > 2*time.Second {
			t.Errorf("%s on a frozen server: err %v after %v", name, err, took)
		} else if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not say %q", err, name)
		}
	}
	syscall.Kill(srv.PID, syscall.SIGCONT)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := r.ReadReports(ctx, "az1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
