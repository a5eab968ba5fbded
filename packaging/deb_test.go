package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestDebInstallUpgradePurge builds two versions of the package from this
// checkout and installs, upgrades, removes and purges it with dpkg in a
// throwaway root: the host's /usr under an overlay whose writes land in the
// test's directory, in a mount namespace of its own, so the host is not
// touched. The maintainer scripts run chrooted there, as dpkg --root runs
// them.
func TestDebInstallUpgradePurge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: the throwaway root (overlay mount, chroot) needs root")
	}
	for _, c := range []string{"dpkg", "dpkg-deb", "unshare", "useradd"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipped: no %s (a Debian host is needed)", c)
		}
	}
	dir := t.TempDir()

	// The default configuration files become conffiles; until the roles'
	// files exist in packaging/etc/azgate, a stand-in checks the mechanism.
	etc := "etc/azgate"
	if fs, _ := filepath.Glob(filepath.Join(etc, "*.yaml")); len(fs) == 0 {
		etc = filepath.Join(dir, "etc")
		os.Mkdir(etc, 0o755)
		os.WriteFile(filepath.Join(etc, "controller.yaml"), []byte("# stand-in default configuration\n"), 0o644)
		t.Logf("packaging/etc/azgate has no default configuration yet: conffiles checked with a stand-in")
	}
	conffile := "/etc/azgate/" + firstFile(t, etc)
	debA := builtDeb(t, dir, "1.0.0", etc)
	debB := builtDeb(t, dir, "1.0.1", etc)

	r := newRoot(t, dir)
	r.run(t, "dpkg --root=/R --force-not-root -i /debs/"+filepath.Base(debA))
	if v := r.run(t, "chroot /R /usr/bin/azgate --version"); !strings.Contains(v, "1.0.0") {
		t.Errorf("installed azgate --version: %q, want 1.0.0", v)
	}
	// azgate-node, what the edge and agent units run (units.go).
	if v := r.run(t, "chroot /R /usr/bin/azgate-node --version"); !strings.Contains(v, "azgate-node version 1.0.0") {
		t.Errorf("installed azgate-node --version: %q, want 1.0.0", v)
	}
	if out := r.run(t, "zcat /R/usr/share/man/man1/azgate-node-edge.1.gz"); !strings.Contains(out, "--attach") {
		t.Errorf("azgate-node-edge(1) does not document --attach:\n%.400s", out)
	}
	for _, role := range []string{"controller", "edge", "agent", "bwmgr", "gslb", "pathd", "prober", "announce"} {
		r.run(t, "test -f /R/lib/systemd/system/azgate-"+role+".service")
		r.run(t, "test -s /R/usr/share/man/man1/azgate-"+role+".1.gz")
	}
	r.run(t, "test -s /R/usr/share/azgate/prometheus/azgate-rules.yml && test -s /R/usr/share/azgate/grafana/azgate.json")
	if out := r.run(t, "zcat /R/usr/share/man/man1/azgate-edge.1.gz"); !strings.Contains(out, "--attach") {
		t.Errorf("azgate-edge(1) does not document --attach:\n%.400s", out)
	}
	if u := r.run(t, "chroot /R getent passwd azgate"); !strings.Contains(u, "/usr/sbin/nologin") {
		t.Errorf("postinst: azgate user %q, want a system user without a shell", u)
	}
	if got := r.run(t, "chroot /R stat -c '%U:%G %a' /etc/azgate"); strings.TrimSpace(got) != "root:azgate 750" {
		t.Errorf("/etc/azgate is %s, want root:azgate 750", got)
	}
	if cf := r.run(t, "dpkg-query --admindir=/R/var/lib/dpkg -W -f='${Conffiles}' azgate"); !strings.Contains(cf, conffile) {
		t.Errorf("conffiles %q lack %s", cf, conffile)
	}

	// An edited conffile survives an upgrade; the role's state too.
	r.run(t, "echo '# edited by the operator' >> /R"+conffile)
	r.run(t, "install -d /R/var/lib/azgate && echo state > /R/var/lib/azgate/token")
	r.run(t, "dpkg --root=/R --force-not-root -i /debs/"+filepath.Base(debB)+" </dev/null")
	if v := r.run(t, "chroot /R /usr/bin/azgate --version"); !strings.Contains(v, "1.0.1") {
		t.Errorf("upgraded azgate --version: %q, want 1.0.1", v)
	}
	if c := r.run(t, "cat /R"+conffile); !strings.Contains(c, "# edited by the operator") {
		t.Errorf("the upgrade replaced the edited %s:\n%s", conffile, c)
	}

	// Remove keeps configuration and state; purge removes both.
	r.run(t, "dpkg --root=/R --force-not-root -r azgate")
	r.run(t, "test ! -e /R/usr/bin/azgate && test ! -e /R/usr/bin/azgate-node && test ! -e /R/lib/systemd/system/azgate-edge.service")
	r.run(t, "test -f /R"+conffile+" && test -f /R/var/lib/azgate/token")
	r.run(t, "dpkg --root=/R --force-not-root -P azgate")
	r.run(t, "test ! -e /R/etc/azgate && test ! -e /R/var/lib/azgate && test ! -e /R/usr/share/man/man1/azgate.1.gz")
	if st := r.run(t, "dpkg-query --admindir=/R/var/lib/dpkg -W -f='${db:Status-Abbrev}' azgate 2>&1 || true"); regexp.MustCompile(`^ii`).MatchString(st) {
		t.Errorf("after purge dpkg still lists azgate: %q", st)
	}
}

func firstFile(t *testing.T, dir string) string {
	t.Helper()
	fs, err := os.ReadDir(dir)
	if err != nil || len(fs) == 0 {
		t.Fatalf("%s: no file (%v)", dir, err)
	}
	return fs[0].Name()
}

// builtDeb returns the package of version built from this checkout with
// the default configuration files of etc, in dir/debs. Packages with
// packaging/etc/azgate are built once per run of the test binary and
// shared by the tests (each build is a minute or more on a busy machine).
func builtDeb(t *testing.T, dir, version, etc string) string {
	t.Helper()
	if etc != "etc/azgate" {
		return mkdeb(t, dir, version, etc)
	}
	debs.Lock()
	defer debs.Unlock()
	if debs.dir == "" {
		d, err := os.MkdirTemp("", "azgate-debs-")
		if err != nil {
			t.Fatal(err)
		}
		debs.dir, debs.built = d, map[string]string{}
	}
	built, ok := debs.built[version]
	if !ok {
		built = mkdeb(t, debs.dir, version, etc)
		debs.built[version] = built
	}
	out := filepath.Join(dir, "debs", filepath.Base(built))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(built, out); err != nil {
		t.Fatal(err)
	}
	return out
}

var debs struct {
	sync.Mutex
	dir   string
	built map[string]string // version -> package
}

func TestMain(m *testing.M) {
	code := m.Run()
	if debs.dir != "" {
		os.RemoveAll(debs.dir)
	}
	os.Exit(code)
}

// mkdeb runs scripts/mkdeb.sh as make deb does, for one version.
func mkdeb(t *testing.T, dir, version, etc string) string {
	t.Helper()
	abs, _ := filepath.Abs(etc)
	cmd := exec.Command("../scripts/mkdeb.sh", filepath.Join(dir, "debs"))
	cmd.Env = append(os.Environ(), "DEB_VERSION="+version, "ETC_DIR="+abs, "GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mkdeb.sh %s: %v\n%s", version, err, out)
	}
	deb := strings.TrimSpace(string(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:]))
	if !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("mkdeb.sh %s printed no package name:\n%s", version, out)
	}
	return deb
}

// throwaway is the root the package is installed into: /R in each
// command's mount namespace, with the host's /usr as the read-only lower
// layer of an overlay whose upper layer is the test's.
type throwaway struct{ dir, root string }

func newRoot(t *testing.T, dir string) throwaway {
	t.Helper()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"usr", "etc", "var/lib/dpkg", "var/cache/man", "tmp", "run", "dev", "proc", ".upper", ".work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if target, err := os.Readlink("/" + l); err == nil {
			os.Symlink(target, filepath.Join(root, l))
		} else {
			t.Skipf("skipped: /%s is not a merged-/usr link (%v): the throwaway root reuses /usr alone", l, err)
		}
	}
	// Only the account databases and what useradd and dpkg read.
	for _, f := range []string{"passwd", "group", "shadow", "gshadow", "login.defs", "nsswitch.conf", "manpath.config"} {
		if b, err := os.ReadFile("/etc/" + f); err == nil {
			os.WriteFile(filepath.Join(root, "etc", f), b, 0o644)
		}
	}
	os.Chmod(filepath.Join(root, "etc/shadow"), 0o640)
	// The root's /usr is the host's: so is its package database (what
	// the package depends on is there).
	if out, err := exec.Command("cp", "-a", "/var/lib/dpkg/.", filepath.Join(root, "var/lib/dpkg")).CombinedOutput(); err != nil {
		t.Fatalf("copy the host's dpkg database: %v\n%s", err, out)
	}
	return throwaway{dir: dir, root: root}
}

// run runs script (sh) with the throwaway root mounted at /R and the
// packages at /debs, and returns its output; a failure ends the test.
func (r throwaway) run(t *testing.T, script string) string {
	t.Helper()
	setup := `set -e
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/usr,upperdir=` + r.root + `/.upper,workdir=` + r.root + `/.work ` + r.root + `/usr
mount --bind /dev ` + r.root + `/dev
mount -t proc proc ` + r.root + `/proc
`
	// /R in a script names the root.
	script = strings.ReplaceAll(script, "/R", "$R")
	script = strings.ReplaceAll(script, "/debs/", r.dir+"/debs/")
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", setup+"R="+r.root+"\n"+script)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}
