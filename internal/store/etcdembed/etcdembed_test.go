package etcdembed

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/store/storetest"
)

// socketInodes returns the inodes of this process's open sockets.
func socketInodes(t *testing.T) map[uint64]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(l, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

// TestEmbeddedUnreachableByOtherUsers starts the controller's embedded
// etcd the way the controller does and, as user nobody, asks every
// listening socket it opened for /version and /members: none may answer
// (issue 7: a peer listener on an abstract socket let any local user
// forge raft messages). The data directory is made 0755 beforehand and
// its parent is world-searchable, so only the mode Start enforces
// protects the sockets.
func TestEmbeddedUnreachableByOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot run a probe as user nobody")
	}
	for _, bin := range []string{"setpriv", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("no %s: cannot probe as user nobody (scripts/setup.sh installs util-linux and curl)", bin)
		}
	}
	parent, err := os.MkdirTemp("", "azgate-etcd-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := socketInodes(t)
	e, err := StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	opened := map[uint64]bool{}
	for ino := range socketInodes(t) {
		if !before[ino] {
			opened[ino] = true
		}
	}
	socks := storetest.ListeningUnix(t, opened)
	if len(socks) == 0 {
		t.Fatal("found no listening unix socket of the embedded etcd")
	}
	t.Logf("etcd listens on %q", socks)

	if fi, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir %s has mode %v, want 0700", dir, fi.Mode().Perm())
	}
	for _, s := range socks {
		if strings.HasPrefix(s, "@") {
			t.Errorf("etcd listens on the abstract unix socket %q: reachable by every local user", s)
		} else if !strings.HasPrefix(s, dir+"/") {
			t.Errorf("etcd listens on %q, outside its 0700 data dir %s", s, dir)
		}
	}

	probe := func(sock, path string, asNobody bool) (string, error) {
		var args []string
		if asNobody {
			args = []string{"setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"}
		}
		args = append(args, "curl", "-sS", "--fail", "--max-time", "3")
		if a, ok := strings.CutPrefix(sock, "@"); ok {
			args = append(args, "--abstract-unix-socket", a)
		} else {
			args = append(args, "--unix-socket", sock)
		}
		args = append(args, "http://etcd"+path)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		return string(out), err
	}
	// The probe works: root reaches the client socket.
	if out, err := probe(filepath.Join(dir, "etcd.sock"), "/version", false); err != nil || !strings.Contains(out, "etcdserver") {
		t.Fatalf("root cannot read /version on the client socket (the probe is broken): %v: %s", err, out)
	}
	for _, s := range socks {
		for _, p := range []string{"/version", "/members"} {
			if out, err := probe(s, p, true); err == nil {
				t.Errorf("user nobody got an answer from etcd's socket %q on %s: %.200s", s, p, out)
			}
		}
	}
}

// TestEmbeddedClientURLs: unix sockets only: a TCP port of an etcd without
// authentication, even on loopback, is open to every local user.
func TestEmbeddedClientURLs(t *testing.T) {
	for _, tc := range []struct{ url, err string }{
		{"http://192.0.2.1:2379", "listens on unix sockets only"},
		{"http://0.0.0.0:2379", "listens on unix sockets only"},
		{"http://127.0.0.1:2379", "listens on unix sockets only"},
		{"http://localhost:2379", "listens on unix sockets only"},
		{"https://127.0.0.1:2379", "listens on unix sockets only"},
		{"tcp://127.0.0.1:2379", "want unix:///path"},
		{"unix://relative/etcd.sock", "want unix:///absolute/path"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			dir := t.TempDir()
			e, err := StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock"), tc.url}, quiet)
			if err == nil {
				e.Close()
				t.Fatalf("%s accepted", tc.url)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %q, want it to say %q", err, tc.err)
			}
		})
	}
}

var quiet = slog.New(slog.DiscardHandler)
