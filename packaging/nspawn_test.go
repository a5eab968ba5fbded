package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNspawnRegion installs the package built from this checkout on a
// system booted by systemd in a container and starts a one-host region
// (controller, one edge, one agent) from the configuration files with
// systemctl, under the shipped units.
//
// The container is systemd-nspawn on a copy-on-write view of the host: an
// overlay with the host's / as the lower layer and a tmpfs as the upper,
// so nothing it writes reaches the host. It has a network of its own
// (--private-network: the veths the test creates are inside) and a bpffs
// instance of its own, mounted for the test on the host and bound to the
// container's /sys/fs/bpf. Two options the units need from the container
// (not from a host booted by systemd): --system-call-filter=bpf, because
// nspawn's own seccomp allow list lacks bpf(2) (without it every bpf()
// of the edge and agent fails with EPERM), and --capability=CAP_BPF,
// CAP_PERFMON, which nspawn does not grant by default.
func TestNspawnRegion(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: booting a container (overlay, bpffs, systemd-nspawn) needs root")
	}
	for _, c := range []string{"systemd-nspawn", "nsenter", "dpkg-deb"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipped: no %s (package systemd-container; scripts/setup.sh installs it)", c)
		}
	}
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		t.Skip("skipped: the host's / has no systemd to boot in the container (/lib/systemd/systemd)")
	}
	if !cgroup2() {
		t.Skip("skipped: no cgroup v2 hierarchy (unified or hybrid) for the container's systemd")
	}
	dir := t.TempDir()
	// AZGATE_DEB: a package built before (make deb), not built again.
	deb := os.Getenv("AZGATE_DEB")
	if deb == "" {
		deb = builtDeb(t, dir, "1.0.0", "etc/azgate")
	}

	m := boot(t, dir)
	if err := copyFile(deb, filepath.Join(m.root, "root", filepath.Base(deb))); err != nil {
		t.Fatal(err)
	}
	m.sh(t, time.Minute, "dpkg -i /root/"+filepath.Base(deb))

	// The one host's wiring: the edge's Internet side (ext0) and underlay
	// (und0), the agent's underlay (und0p, the other end of und0) and a
	// guest behind the host (gst0).
	m.sh(t, 10*time.Second, `set -e
ip link add ext0 type veth peer name ext0p
ip link add und0 type veth peer name und0p
ip link add gst0 type veth peer name gst0p
for i in ext0 ext0p und0 und0p gst0 gst0p; do ip link set $i up; done
ip addr add 203.0.113.1/24 dev ext0
ip addr add 198.18.0.1/24 dev und0
ip addr add 198.18.0.2/24 dev und0p
ip addr add 198.19.21.254/24 dev gst0`)

	// Site data added to the shipped files (the rest stays as shipped:
	// the defaults must start the roles); the controller's as shipped.
	// Edge and agent default to metrics on 127.0.0.1:9464 and :9465.
	m.sh(t, 10*time.Second, `set -e
printf 'name: edge-a1\nattach: [ext0, und0]\n' >>/etc/azgate/edge.yaml
printf 'name: host-a1\nunderlay-if: und0p\n' >>/etc/azgate/agent.yaml`)

	// systemctl start returns once the role said READY=1 (Type=notify).
	m.sh(t, 90*time.Second, "systemctl start azgate-controller")
	out := m.sh(t, 30*time.Second, `set -e
azgate az create az-a
azgate set create set-a --prefix 198.51.100.0/24 --edge name=edge-a1,underlay=198.18.0.1
azgate host create host-a1 --az az-a --underlay 198.18.0.2 --guest name=g1,address=198.19.21.1,vsid=5001
azgate eip create 198.51.100.10
azgate eip bind 198.51.100.10 --host host-a1 --guest g1`)
	// "EIP ... bound to host-a1/g1 (revision N)"
	var bound int64
	if i := strings.LastIndex(out, "(revision "); i >= 0 {
		fmt.Sscanf(out[i:], "(revision %d)", &bound)
	}
	if bound == 0 {
		t.Fatalf("no revision in the output of eip bind:\n%s", out)
	}
	m.sh(t, 90*time.Second, "systemctl start azgate-edge azgate-agent")

	for _, u := range []string{"azgate-controller", "azgate-edge", "azgate-agent"} {
		state := strings.TrimSpace(m.sh(t, 10*time.Second, "systemctl show -p ActiveState --value "+u)) + " " +
			strings.TrimSpace(m.sh(t, 10*time.Second, "systemctl show -p SubState --value "+u))
		if state != "active running" {
			t.Errorf("%s: %s, want active (running)", u, state)
		}
		// Capabilities, not root: the main process runs as azgate.
		pid := strings.TrimSpace(m.sh(t, 10*time.Second, "systemctl show -p MainPID --value "+u))
		if uid := m.sh(t, 10*time.Second, "awk '/^Uid:/{print $2}' /proc/"+pid+"/status"); strings.TrimSpace(uid) == "0" {
			t.Errorf("%s runs as root", u)
		}
	}

	// The controller sees both nodes at the revision that bound the EIP
	// or later: the edge with the EIP's route, the agent attached to its
	// underlay and the guest's interface.
	var st struct {
		Nodes map[string][]struct {
			Name            string
			AppliedRevision int64 `json:"applied_revision"`
			Interfaces      []string
			Routes          int
			Errors          uint64
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := m.sh(t, 10*time.Second, "azgate status --json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("azgate status --json: %v\n%.2000s", err, out)
		}
		edge, agent := st.Nodes["edge"], st.Nodes["agent"]
		ok := len(edge) == 1 && len(agent) == 1 &&
			edge[0].Name == "edge-a1" && strings.Join(edge[0].Interfaces, ",") == "ext0,und0" && edge[0].Routes >= 1 &&
			edge[0].AppliedRevision >= bound &&
			agent[0].Name == "host-a1" && strings.Join(agent[0].Interfaces, ",") == "und0p,gst0" &&
			agent[0].AppliedRevision >= bound
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("azgate status: want edge-a1 on ext0,und0 with the EIP's route and host-a1 on und0p,gst0, both at revision %d or later; got %+v\n%s",
				bound, st.Nodes, m.sh(t, 10*time.Second, "azgate status"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for role, addr := range map[string]string{"edge": "127.0.0.1:9464", "agent": "127.0.0.1:9465"} {
		if out, err := m.run(10*time.Second, "curl -sSf http://"+addr+"/metrics"); err != nil || !strings.Contains(out, "azgate_") {
			t.Errorf("%s metrics on %s: %v\n%.500s", role, addr, err, out)
		}
	}
	t.Logf("azgate status:\n%s", m.sh(t, 10*time.Second, "azgate status"))
}

// cgroup2 reports whether the host has a cgroup v2 hierarchy (at
// /sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1 ones).
func cgroup2() bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == "cgroup2" && (f[1] == "/sys/fs/cgroup" || f[1] == "/sys/fs/cgroup/unified") {
			return true
		}
	}
	return false
}

// machine is a booted container: its nspawn process and its PID 1.
type machine struct {
	root  string
	name  string
	nspwn *exec.Cmd
	pid1  int
	log   string
}

// boot starts systemd in a container on an overlay of the host's / and
// waits until it finished booting. Everything it mounts and starts is
// undone at the test's end, also when the test fails.
func boot(t *testing.T, dir string) *machine {
	t.Helper()
	m := &machine{root: filepath.Join(dir, "root"), name: fmt.Sprintf("azgate-test-%d", os.Getpid()), log: filepath.Join(dir, "nspawn.log")}
	up, bpffs := filepath.Join(dir, "up"), filepath.Join(dir, "bpffs")
	for _, d := range []string{m.root, up, bpffs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		target := args[len(args)-1]
		t.Cleanup(func() {
			if out, err := exec.Command("umount", target).CombinedOutput(); err != nil {
				t.Logf("umount %s: %v %s; detaching it", target, err, out)
				exec.Command("umount", "-l", target).Run()
			}
		})
	}
	mount("-t", "tmpfs", "tmpfs", up)
	for _, d := range []string{"u", "w"} {
		os.Mkdir(filepath.Join(up, d), 0o755)
	}
	mount("-t", "overlay", "overlay", "-o", "lowerdir=/,upperdir="+up+"/u,workdir="+up+"/w", m.root)
	// A bpffs of the container's own: each mount is a new instance.
	mount("-t", "bpf", "bpf", bpffs)

	logf, err := os.Create(m.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// --register=no --keep-unit: there is no systemd on the host to ask
	// for a machine or a scope (PID 1 need not be systemd).
	m.nspwn = exec.Command("systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
		"--machine="+m.name, "-D", m.root, "--private-network",
		"--capability=CAP_BPF,CAP_PERFMON", "--system-call-filter=bpf",
		"--bind="+bpffs+":/sys/fs/bpf", "-b", "systemd.firstboot=off")
	m.nspwn.Stdout, m.nspwn.Stderr = logf, logf
	m.nspwn.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := m.nspwn.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	done := make(chan struct{})
	go func() { m.nspwn.Wait(); close(done) }()
	t.Cleanup(func() {
		if t.Failed() && m.pid1 != 0 {
			out, _ := m.run(20*time.Second, "systemctl --no-pager status 'azgate-*'; journalctl --no-pager -n 80 -u 'azgate-*'")
			t.Logf("the container's azgate units:\n%s", out)
		}
		// SIGTERM: nspawn halts the container's systemd (SIGRTMIN+3).
		m.nspwn.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Logf("the container did not halt in 30s: killing systemd-nspawn %d", m.nspwn.Process.Pid)
			m.nspwn.Process.Kill()
			<-done
		}
		os.RemoveAll("/run/systemd/nspawn/propagate/" + m.name)
	})

	// PID 1 of the container: nspawn's child running systemd.
	deadline := time.Now().Add(30 * time.Second)
	for m.pid1 == 0 {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(m.log)
			t.Fatalf("no systemd in the container after 30s:\n%s", b)
		}
		select {
		case <-done:
			b, _ := os.ReadFile(m.log)
			t.Fatalf("systemd-nspawn exited: %v\n%s", m.nspwn.ProcessState, b)
		case <-time.After(200 * time.Millisecond):
		}
		m.pid1 = childNamed(m.nspwn.Process.Pid, "systemd")
	}
	// running, or degraded: a unit of the host's own that fails in the
	// container does not concern the test.
	// Until systemd opened its bus, systemctl cannot ask it.
	deadline = time.Now().Add(90 * time.Second)
	for {
		out, err := m.run(time.Until(deadline), "systemctl is-system-running --wait")
		s := strings.TrimSpace(out)
		if err == nil || s == "degraded" {
			return m
		}
		if !strings.Contains(s, "Failed to connect to bus") || time.Now().After(deadline) {
			t.Fatalf("the container did not finish booting: %q %v", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// childNamed returns the PID of a child of ppid whose command is comm.
func childNamed(ppid int, comm string) int {
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.HasSuffix(s[:i], " ("+comm) {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			return pid
		}
	}
	return 0
}

// run runs script (sh) in the container, in all its namespaces.
func (m *machine) run(timeout time.Duration, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(m.pid1), "-a", "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "LANG=C.UTF-8"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	return out.String(), err
}

// sh is run that ends the test on failure.
func (m *machine) sh(t *testing.T, timeout time.Duration, script string) string {
	t.Helper()
	out, err := m.run(timeout, script)
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s", script, err, out)
	}
	return out
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
