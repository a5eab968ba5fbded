//go:build !node

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The systemd units of packaging/systemd (issue 20.1): one per role, each
// starting `/usr/bin/azgate ROLE --config /etc/azgate/ROLE.yaml`, the
// node roles (edge, agent) /usr/bin/azgate-node (node.go).
const unitDir = "../../packaging/systemd"

// nodeRoles are the roles of azgate-node (go build -tags node).
var nodeRoles = []string{"edge", "agent"}

// unitRoles are the roles a host runs as services.
var unitRoles = []string{"controller", "edge", "agent", "bwmgr", "gslb", "pathd", "prober", "announce"}

// unit is a unit file: its settings by section, each key's values in order.
type unit struct {
	path     string
	text     string
	sections map[string]map[string][]string
}

func (u unit) get(section, key string) []string { return u.sections[section][key] }

func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u.get(section, key)
	if len(v) != 1 {
		t.Fatalf("%s: [%s] %s: want one value, have %q", u.path, section, key, v)
	}
	return v[0]
}

// parseUnit reads a unit file as systemd does for what the tests check:
// sections, KEY=VALUE lines, '#'/';' comments, backslash continuations.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{path: path, text: string(b), sections: map[string]map[string][]string{}}
	var sec, cont string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cont != "" {
			line, cont = cont+" "+line, ""
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		if line[0] == '[' && line[len(line)-1] == ']' {
			sec = line[1 : len(line)-1]
			if u.sections[sec] == nil {
				u.sections[sec] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || sec == "" {
			t.Fatalf("%s:%d: %q: not KEY=VALUE in a section", path, n, line)
		}
		u.sections[sec][strings.TrimSpace(k)] = append(u.sections[sec][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	return u
}

// roleOf checks a unit's azgate command line and returns its role's command
// and arguments. Flags must be the role's own (--config and --check-config
// are: roleCommand).
func roleOf(t *testing.T, u unit, line string) (string, []string) {
	t.Helper()
	args := strings.Fields(line)
	want := "/usr/bin/azgate"
	if len(args) >= 2 && slices.Contains(nodeRoles, args[1]) {
		want = "/usr/bin/azgate-node"
	}
	if len(args) < 2 || args[0] != want {
		t.Fatalf("%s: %q: want %s ROLE ...", u.path, line, want)
	}
	root := newRoot()
	c, rest, err := root.Find(args[1:])
	if err != nil || c == root || c.Name() != args[1] || !c.Runnable() {
		t.Fatalf("%s: %q: %q is not a role of the binary (found %q, %v)", u.path, line, args[1], c.Name(), err)
	}
	for _, a := range rest {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if c.Flags().Lookup(name) == nil {
			t.Errorf("%s: %q: azgate %s has no flag --%s", u.path, line, args[1], name)
		}
	}
	return args[1], args[2:]
}

// notifySources are where each role's process tells systemd READY=1.
var notifySources = map[string][]string{
	"controller": {"../../internal/controller"},
	"edge":       {"../../internal/edge"},
	"agent":      {"../../internal/agent"},
	"bwmgr":      {"bwmgr.go", "../../internal/bandwidth", "../../internal/bwenforce"},
	"gslb":       {"gslb.go", "../../internal/gslbrole"},
	"pathd":      {"pathd.go", "../../internal/pathd"},
	"prober":     {"prober.go", "../../internal/prober"},
	"announce":   {"announce.go", "../../internal/announce"},
}

// notifies reports whether a role's sources send sdnotify.Ready.
func notifies(t *testing.T, role string) bool {
	t.Helper()
	for _, src := range notifySources[role] {
		files := []string{src}
		if fi, err := os.Stat(src); err != nil {
			t.Fatal(err)
		} else if fi.IsDir() {
			files, _ = filepath.Glob(filepath.Join(src, "*.go"))
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "sdnotify.Ready") {
				return true
			}
		}
	}
	return false
}

// TestUnits: every role has a unit, and each unit starts a real role of
// this binary with its configuration file, checks the file first, is
// Type=notify exactly when the role tells systemd it is ready, runs
// sandboxed, and names (in a comment) why it holds each capability.
func TestUnits(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(unitDir, "*.service"))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, f := range files {
		u := parseUnit(t, f)
		role, args := roleOf(t, u, u.one(t, "Service", "ExecStart"))
		seen = append(seen, role)
		if want := "azgate-" + role + ".service"; filepath.Base(f) != want {
			t.Errorf("%s starts %s: name it %s", f, role, want)
		}
		cfg := []string{"--config", "/etc/azgate/" + role + ".yaml"}
		if !slices.Equal(args, cfg) {
			t.Errorf("%s: ExecStart arguments %q, want %q", f, args, cfg)
		}
		// The configuration is checked before the role starts.
		var checked bool
		for _, pre := range u.get("Service", "ExecStartPre") {
			if strings.HasPrefix(pre, "+") {
				continue // privileged preparation, outside the sandbox
			}
			r, a := roleOf(t, u, pre)
			checked = checked || r == role && slices.Equal(a, append(cfg, "--check-config"))
		}
		if !checked {
			t.Errorf("%s: no ExecStartPre=/usr/bin/azgate[-node] %s %s --check-config", f, role, strings.Join(cfg, " "))
		}
		want := "exec"
		if notifies(t, role) {
			want = "notify"
		}
		if got := u.one(t, "Service", "Type"); got != want {
			t.Errorf("%s: Type=%s, want %s (the role's sources %s sdnotify.Ready)", f, got, want, map[bool]string{true: "send", false: "never send"}[want == "notify"])
		}
		// Every role re-reads its config file's log-level on SIGHUP
		// (roleCommand's reloadOnHUP; TestRoleReloadsOnSIGHUP).
		if r := u.get("Service", "ExecReload"); !slices.Equal(r, []string{"/bin/kill -HUP $MAINPID"}) {
			t.Errorf("%s: ExecReload=%q, want /bin/kill -HUP $MAINPID (azgate %s re-reads log-level on SIGHUP)", f, r, role)
		}
		for k, v := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
			"User": "azgate", "Restart": "on-failure", "PrivateTmp": "yes", "RuntimeDirectory": "azgate/" + role} {
			if got := u.get("Service", k); !slices.Equal(got, []string{v}) {
				t.Errorf("%s: %s=%q, want %s", f, k, got, v)
			}
		}
		amb := strings.Fields(strings.Join(u.get("Service", "AmbientCapabilities"), " "))
		bound := strings.Fields(strings.Join(u.get("Service", "CapabilityBoundingSet"), " "))
		if len(u.get("Service", "CapabilityBoundingSet")) == 0 {
			t.Errorf("%s: no CapabilityBoundingSet: the role would keep every capability it could get", f)
		}
		for _, c := range amb {
			if !slices.Contains(bound, c) {
				t.Errorf("%s: %s ambient but not in the bounding set", f, c)
			}
			if !strings.Contains(commentsOf(u.text), c) {
				t.Errorf("%s: %s granted without a comment saying why", f, c)
			}
		}
		if len(amb) > 0 && slices.Equal(u.get("Service", "PrivateUsers"), []string{"yes"}) {
			t.Errorf("%s: PrivateUsers=yes with capabilities: they would hold only in the unit's own user namespace", f)
		}
	}
	slices.Sort(seen)
	want := slices.Clone(unitRoles)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Errorf("units start %q, want one per role %q", seen, want)
	}
}

func commentsOf(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestUnitsVerify runs systemd-analyze verify on the units with the built
// binaries at /usr/bin/azgate and /usr/bin/azgate-node: a read-only overlay of /usr/bin in a mount
// namespace of the test's own (root), so the host's /usr/bin is untouched.
func TestUnitsVerify(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: the overlay of /usr/bin needs root (mount namespace)")
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipped: no systemd-analyze (Debian package systemd)")
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(goTool(), "build", "-o", filepath.Join(bin, "azgate"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command(goTool(), "build", "-tags", "node", "-o", filepath.Join(bin, "azgate-node"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags node: %v\n%s", err, out)
	}
	units, _ := filepath.Glob(filepath.Join(unitDir, "*.service"))
	abs := make([]string, len(units))
	for i, u := range units {
		abs[i], _ = filepath.Abs(u)
	}
	script := `set -e
mount --make-rprivate /
mount -t overlay overlay -o lowerdir="$1":/usr/bin /usr/bin
shift
exec "$@"`
	args := append([]string{"-m", "sh", "-c", script, "sh", bin, sa, "verify", "--man=no"}, abs...)
	out, err := exec.Command("unshare", args...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check itself: a unit with a mistyped setting is refused.
	bad := filepath.Join(t.TempDir(), "azgate-bad.service")
	b, _ := os.ReadFile(units[0])
	os.WriteFile(bad, []byte(strings.Replace(string(b), "[Service]\n", "[Service]\nType=notiffy\n", 1)), 0o644)
	args = append([]string{"-m", "sh", "-c", script, "sh", bin, sa, "verify", "--man=no"}, bad)
	if out, err := exec.Command("unshare", args...).CombinedOutput(); !strings.Contains(string(out), "notiffy") {
		t.Errorf("systemd-analyze verify passed a unit with Type=notiffy: %v\n%s", err, out)
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}
