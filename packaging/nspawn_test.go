package packaging

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
)

// TestNspawnRegion installs the package built from this checkout on a
// system booted by systemd in a container, starts a one-host region from
// the configuration files with systemctl, every role under its shipped
// unit, and sends traffic through it.
//
// The container is systemd-nspawn on a copy-on-write view of the host: an
// overlay with the host's / as the lower layer and a tmpfs as the upper,
// so nothing it writes reaches the host. It has a network of its own
// (--private-network) and a bpffs instance of its own, mounted for the
// test on the host and bound to the container's /sys/fs/bpf. Two options
// the units need from the container (not from a host booted by systemd):
// --system-call-filter=bpf, because nspawn's own seccomp allow list lacks
// bpf(2) (without it every bpf() of the edge and agent fails with EPERM),
// and --capability=CAP_BPF,CAP_PERFMON, which nspawn does not grant by
// default.
//
// The wiring (wire): the container's network is the edge's; the agent
// runs in a network namespace of its own inside the container (a drop-in
// with NetworkNamespacePath=), because edge and agent in one network
// stack would each find the other's underlay address local and
// bpf_fib_lookup would not forward to it. A client namespace and a guest
// namespace made by the test hang off the edge's Internet side and the
// agent's guest link; the client's namespace is the upstream router too
// (BIRD, when installed), which the edge and announce peer with.
func TestNspawnRegion(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: booting a container (overlay, bpffs, systemd-nspawn) needs root")
	}
	for _, c := range []string{"systemd-nspawn", "nsenter", "dpkg-deb"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipped: no %s (package systemd-container; scripts/setup.sh installs it)", c)
		}
	}
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("skipped: no ethtool (the veths' GRO and checksum offload for XDP; scripts/setup.sh installs it)")
	}
	// The container runs the host's own programs (its / is an overlay of
	// the host's).
	for c, pkg := range map[string]string{"/lib/systemd/systemd": "systemd", "/usr/bin/redis-server": "redis-server (bwmgr's store)",
		"/lib/systemd/system/redis-server.service": "redis-server", "/usr/bin/dig": "dnsutils (a DNS client for gslb)",
		"/usr/bin/curl": "curl (the roles' /metrics)"} {
		if _, err := os.Stat(c); err != nil {
			t.Skipf("skipped: the host's / has no %s to run in the container (package %s; scripts/setup.sh installs it)", c, pkg)
		}
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
	n := wire(t, m)
	// The client's namespace is the upstream router too, when BIRD is
	// there: the edge's and announce's sessions.
	bird := router(t, n, dir)

	// Site data added to the shipped files (the rest stays as shipped:
	// the defaults must start the roles); the controller's and gslb's
	// files as shipped. Metrics: the controller on its API (7080), edge
	// 9464, agent 9465 and gslb 9467 by default, bwmgr 9466, prober 9468
	// and announce 9469 set here, pathd on its API with its token.
	token := randomHex(t)
	m.sh(t, 10*time.Second, `set -e
printf 'name: edge-a1\nattach: [ext0, und0]\n' >>/etc/azgate/edge.yaml
printf 'name: host-a1\nunderlay-if: und0p\n' >>/etc/azgate/agent.yaml
printf 'scope: az\nzone: az-a\nstore: redis://127.0.0.1:6379\nregion-store: redis://127.0.0.1:6379\nmetrics-listen: 127.0.0.1:9466\n' >>/etc/azgate/bwmgr.yaml
for f in pathd prober; do install -o azgate -g azgate -m 0600 /dev/null /etc/azgate/$f.token; echo `+token+` >/etc/azgate/$f.token; done
printf 'listen: 127.0.0.1:7090\nregion: region-a\ntoken-file: /etc/azgate/pathd.token\n' >>/etc/azgate/pathd.yaml
printf 'node: edge-a1\nrelay: [relay-b=127.0.0.1:7090]\nreport-url: http://127.0.0.1:7090/v1/reports\ntoken-file: /etc/azgate/prober.token\nmetrics-listen: 127.0.0.1:9468\ninterval: 1s\n' >>/etc/azgate/prober.yaml
printf 'vip: 192.0.2.53/32\nasn: 64512\nnext-hop: `+announceAddr+`\nlocal-address: `+announceAddr+`\npeer: [`+clientAddr+`:64500]\ncheck: [http://127.0.0.1:7090/healthz]\nstatus-listen: 127.0.0.1:9469\n' >>/etc/azgate/announce.yaml
# The agent in its own network namespace (see wire).
mkdir -p /etc/systemd/system/azgate-agent.service.d
printf '[Service]\nNetworkNamespacePath=/run/netns/`+agentNetns+`\n' >/etc/systemd/system/azgate-agent.service.d/netns.conf
systemctl daemon-reload`)

	// systemctl start returns once the role said READY=1 (Type=notify).
	m.sh(t, 90*time.Second, "systemctl start azgate-controller")
	out := m.sh(t, 30*time.Second, `set -e
azgate az create az-a
azgate set create set-a --prefix 198.51.100.0/24 --edge name=edge-a1,underlay=198.18.0.1
azgate set bgp set-a --asn 64501 --hold-time 9
azgate set edge-bgp set-a edge-a1 --router-id `+edgeExt+` --next-hop `+edgeExt+` --peer address=`+clientAddr+`,asn=64500
azgate host create host-a1 --az az-a --underlay 198.18.0.2 --guest name=g1,address=`+guestAddr+`,vsid=5001
azgate eip create `+eip+`
azgate eip bind `+eip+` --host host-a1 --guest g1
azgate dns zone create example.com --ns ns1.example.com --record "ns1 A 192.0.2.53" --record "www A `+eip+`"`)
	// "EIP ... bound to host-a1/g1 (revision N)"
	var bound int64
	if i := strings.LastIndex(out, "(revision "); i >= 0 {
		fmt.Sscanf(out[i:], "(revision %d)", &bound)
	}
	if bound == 0 {
		t.Fatalf("no revision in the output of eip bind:\n%s", out)
	}
	m.sh(t, 90*time.Second, "systemctl start azgate-edge azgate-agent")
	m.sh(t, 60*time.Second, "systemctl start redis-server")
	m.sh(t, 90*time.Second, "systemctl start azgate-bwmgr azgate-gslb azgate-pathd")
	m.sh(t, 90*time.Second, "systemctl start azgate-prober azgate-announce")

	t.Run("units", func(t *testing.T) { checkUnits(t, m, token) })
	t.Run("status", func(t *testing.T) { checkStatus(t, m, bound) })
	t.Run("dns", func(t *testing.T) {
		// The gslb answers for the zone, authoritatively (aa), from
		// the store.
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, err := m.run(10*time.Second, "dig +norec +time=1 +tries=1 @127.0.0.1 -p 5353 www.example.com A")
			if err == nil && strings.Contains(out, "status: NOERROR") && regexp.MustCompile(`flags: qr aa`).MatchString(out) &&
				regexp.MustCompile(`www\.example\.com\.\s+\d+\s+IN\s+A\s+`+regexp.QuoteMeta(eip)).MatchString(out) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dig @127.0.0.1 -p 5353 www.example.com A: want an authoritative answer %s: %v\n%s", eip, err, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	t.Run("traffic", func(t *testing.T) { checkTraffic(t, m, n) })
	t.Run("bgp", func(t *testing.T) {
		if bird == "" {
			t.Skip("skipped: no BIRD (/usr/sbin/bird, package bird2) for the upstream router")
		}
		// The router learns the set's prefix from the edge and the VIP
		// from announce, each next hop the speaker's own address.
		want := map[string]string{"edge": "198.51.100.0/24 via " + edgeExt, "ann": "192.0.2.53/32 via " + announceAddr}
		deadline := time.Now().Add(60 * time.Second)
		for proto, route := range want {
			for {
				out, err := exec.Command("birdc", "-s", bird, "show", "route", "protocol", proto).CombinedOutput()
				if err == nil && regexp.MustCompile(regexp.QuoteMeta(strings.Fields(route)[0])+`\s+.*\n?\s*via `+regexp.QuoteMeta(strings.Fields(route)[2])).Match(out) {
					break
				}
				if time.Now().After(deadline) {
					p, _ := exec.Command("birdc", "-s", bird, "show", "protocols", "all").CombinedOutput()
					t.Fatalf("BIRD: no route %s from %s: %v\n%s\n%s", route, proto, err, out, p)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
		routes, _ := exec.Command("birdc", "-s", bird, "show", "route").CombinedOutput()
		t.Logf("BIRD's routes:\n%s", routes)
		out := m.sh(t, 10*time.Second, "curl -sSf http://127.0.0.1:9469/metrics")
		if metricSum(out, "azgate_announce_bgp_session_established") < 1 {
			t.Errorf("announce: no BGP session established in its metrics:\n%.1500s", out)
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("azgate status:\n%s", m.sh(t, 10*time.Second, "azgate status"))
}

// The region's addresses: documentation and benchmarking ranges, as the
// lab's (internal/lab/topology.go).
const (
	eip        = "198.51.100.10"
	clientAddr = "203.0.113.10"
	edgeExt    = "203.0.113.1"
	// announceAddr: announce's own address on the router's segment
	// (ext0's second), so BIRD tells its session from the edge's.
	announceAddr = "203.0.113.3"
	guestAddr    = "198.19.21.1"
	guestGW      = "198.19.21.0"
	// guestMTU: a guest's packets fit the 1500-byte underlay after
	// NVGRE (lab.GuestMTU).
	guestMTU = 1500 - 42
	// agentNetns is the agent's network namespace in the container.
	agentNetns = "host-a1"
)

// wired is the region's network: the container's namespace (the edge's),
// the agent's, and the test's client and guest.
type wired struct {
	ctr, agent, client, guest *netlab.Node
}

// wire builds the region's network around the container with netlab:
//
//	client eth0 203.0.113.10/24 --- ext0 203.0.113.1/24   container (edge)
//	                                und0 198.18.0.1/24
//	                                  |
//	agent netns host-a1:            und0p 198.18.0.2/24
//	                                gst0 198.19.21.0/31 --- eth0 198.19.21.1/31  guest
//
// The container's namespace and the agent's (made inside the container,
// where the unit's drop-in names it) are given names on the host for the
// test's netlink handles; the names, the client and the guest are removed
// at the test's end, the container's links go with the container.
func wire(t *testing.T, m *machine) *wired {
	t.Helper()
	m.sh(t, 10*time.Second, "ip netns add "+agentNetns+" && ip -n "+agentNetns+" link set lo up")
	prefix := fmt.Sprintf("azn%d-", os.Getpid())
	node := func(name, nsfile string) *netlab.Node {
		t.Helper()
		var err error
		if nsfile != "" {
			err = netns.Attach(prefix+name, nsfile)
		} else {
			err = netns.Create(prefix + name)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := netns.Delete(prefix + name); err != nil {
				t.Logf("netns %s: %v", prefix+name, err)
			}
		})
		n, err := netlab.OpenNode(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	w := &wired{
		ctr:    node("ctr", fmt.Sprintf("/proc/%d/ns/net", m.pid1)),
		agent:  node("h1", fmt.Sprintf("/proc/%d/root/run/netns/%s", m.pid1, agentNetns)),
		client: node("cli", ""),
		guest:  node("g1", ""),
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(netlab.Veth(netlab.End{Node: w.client, Dev: "eth0"}, netlab.End{Node: w.ctr, Dev: "ext0"}, 0))
	must(netlab.Veth(netlab.End{Node: w.ctr, Dev: "und0"}, netlab.End{Node: w.agent, Dev: "und0p"}, 0))
	must(netlab.Veth(netlab.End{Node: w.agent, Dev: "gst0"}, netlab.End{Node: w.guest, Dev: "eth0"}, guestMTU))
	for _, e := range []struct {
		n   *netlab.Node
		dev string
	}{{w.client, "eth0"}, {w.ctr, "ext0"}, {w.ctr, "und0"}, {w.agent, "und0p"}, {w.agent, "gst0"}, {w.guest, "eth0"}} {
		must(e.n.XDPReady(e.dev))
	}
	must(w.client.Addr("eth0", clientAddr+"/24"))
	must(w.client.Route("default", edgeExt, "eth0"))
	must(w.ctr.Addr("ext0", edgeExt+"/24"))
	must(w.ctr.Addr("ext0", announceAddr+"/24"))
	must(w.ctr.Addr("und0", "198.18.0.1/24"))
	must(w.agent.Addr("und0p", "198.18.0.2/24"))
	must(w.agent.Addr("gst0", guestGW+"/31"))
	must(w.guest.Addr("eth0", guestAddr+"/31"))
	must(w.guest.Route("default", guestGW, "eth0"))
	// bpf_fib_lookup answers "forwarding disabled" where it is off.
	must(w.ctr.Forwarding())
	must(w.agent.Forwarding())
	return w
}

// router starts BIRD in the client's namespace as the region's upstream
// router: passive eBGP sessions with the edge (AS 64501) and announce (AS
// 64512), everything learnt kept in BIRD (no kernel export: the client
// reaches the EIP by its default route). It returns BIRD's control
// socket, or "" without BIRD. BIRD is stopped, by its PID, at the
// test's end.
func router(t *testing.T, w *wired, dir string) string {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/bird"); err != nil {
		return ""
	}
	conf, sock := filepath.Join(dir, "bird.conf"), filepath.Join(dir, "bird.ctl")
	err := os.WriteFile(conf, []byte(`log stderr all;
router id `+clientAddr+`;
protocol device { scan time 10; }
template bgp speaker {
	local `+clientAddr+` as 64500;
	passive on;
	error wait time 1, 2;
	ipv4 { import all; export none; };
}
protocol bgp edge from speaker { neighbor `+edgeExt+` as 64501; }
protocol bgp ann from speaker { neighbor `+announceAddr+` as 64512; }
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "bird.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := w.client.Cmd("/usr/sbin/bird", "-f", "-c", conf, "-s", sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("bird: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "bird.log"))
			t.Logf("bird's log:\n%.3000s", b)
		}
	})
	return sock
}

// checkUnits asserts every role's unit active and running, never
// restarted, as its unit's user, after its ExecStartPre --check-config
// passed, with its /metrics answering.
func checkUnits(t *testing.T, m *machine, token string) {
	agentNs := "nsenter --net=/run/netns/" + agentNetns + " "
	metrics := map[string]struct{ cmd, want string }{
		"controller": {"curl -sSf http://127.0.0.1:7080/metrics", "azgate_"},
		"edge":       {"curl -sSf http://127.0.0.1:9464/metrics", "azgate_dataplane_packets_total"},
		"agent":      {agentNs + "curl -sSf http://127.0.0.1:9465/metrics", "azgate_dataplane_packets_total"},
		"bwmgr":      {"curl -sSf http://127.0.0.1:9466/metrics", "azgate_bwmgr_active 1"},
		"gslb":       {"curl -sSf http://127.0.0.1:9467/metrics", "azgate_gslb_"},
		"pathd":      {"curl -sSf -H 'Authorization: Bearer " + token + "' http://127.0.0.1:7090/metrics", "azgate_pathd_reports_total"},
		"prober":     {"curl -sSf http://127.0.0.1:9468/metrics", "azgate_prober_sent_total"},
		"announce":   {"curl -sSf http://127.0.0.1:9469/metrics", "azgate_announce_check_up"},
	}
	for _, role := range roles {
		u := "azgate-" + role
		show := func(p string) string {
			return strings.TrimSpace(m.sh(t, 10*time.Second, "systemctl show -p "+p+" --value "+u))
		}
		if state := show("ActiveState") + " " + show("SubState"); state != "active running" {
			t.Errorf("%s: %s, want active (running)", u, state)
		}
		if r := show("NRestarts"); r != "0" {
			t.Errorf("%s: restarted %s times", u, r)
		}
		// ExecStartPre: "{ path=... ; argv[]=... --check-config ; ... ; code=exited ; status=0/0 }"
		pre, checked := show("ExecStartPre"), false
		for _, e := range strings.Split(pre, "{") {
			if strings.Contains(e, " --check-config ;") {
				checked = true
				if !regexp.MustCompile(`; code=exited ; status=0(/\S+)? }`).MatchString(e) {
					t.Errorf("%s: ExecStartPre --check-config did not exit 0: {%s", u, e)
				}
			}
		}
		if !checked {
			t.Errorf("%s: no ExecStartPre with --check-config: %s", u, pre)
		}
		// The unit's user, not root: the main process runs as it.
		b, err := Unit(role)
		if err != nil {
			t.Fatal(err)
		}
		user := regexp.MustCompile(`(?m)^User=(\S+)`).FindStringSubmatch(string(b))
		if user == nil || user[1] == "root" {
			t.Errorf("%s: User=%v: want a user of its own", u, user)
			continue
		}
		pid := show("MainPID")
		uid := strings.TrimSpace(m.sh(t, 10*time.Second, "awk '/^Uid:/{print $2}' /proc/"+pid+"/status"))
		if want := strings.TrimSpace(m.sh(t, 10*time.Second, "id -u "+user[1])); uid != want || uid == "0" {
			t.Errorf("%s runs as uid %s, want %s (%s)", u, uid, want, user[1])
		}
	}
	// Some metrics say the role works (bwmgr owns its scope, pathd has
	// had a report from the prober, announce ran its check): they are
	// waited for.
	deadline := time.Now().Add(30 * time.Second)
	for _, role := range roles {
		mt := metrics[role]
		for {
			out, err := m.run(10*time.Second, mt.cmd)
			if err == nil && strings.Contains(out, mt.want) && (role != "pathd" || metricSum(out, "azgate_pathd_reports_total") > 0) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s /metrics (%s): want %q: %v\n%.1500s", role, mt.cmd, mt.want, err, out)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// checkStatus asserts the controller sees both nodes at the revision that
// bound the EIP or later: the edge with the EIP's route, the agent
// attached to its underlay and the guest's interface.
func checkStatus(t *testing.T, m *machine, bound int64) {
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("azgate status: want edge-a1 on ext0,und0 with the EIP's route and host-a1 on und0p,gst0, both at revision %d or later; got %+v\n%s",
				bound, st.Nodes, m.sh(t, 10*time.Second, "azgate status"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkTraffic sends UDP from the client to the EIP: the edge's XDP
// program encapsulates it to the agent's host, the agent decapsulates
// it to the guest, which echoes it; the answer comes back from the EIP
// the same way. The edge's counters of both directions move.
func checkTraffic(t *testing.T, m *machine, w *wired) {
	var echo net.PacketConn
	if err := w.guest.Do(func() (err error) {
		echo, err = net.ListenPacket("udp4", guestAddr+":7007")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	seen := make(chan string, 64)
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case seen <- from.String():
			default:
			}
			echo.WriteTo(buf[:k], from)
		}
	}()
	var c net.Conn
	if err := w.client.Do(func() (err error) {
		c, err = net.Dial("udp4", eip+":7007")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	edgeCounters := func() (encap, decap float64) {
		out := m.sh(t, 10*time.Second, "curl -sSf http://127.0.0.1:9464/metrics")
		return metricSum(out, "azgate_dataplane_packets_total", `role="edge"`, `outcome="encap_tx"`),
			metricSum(out, "azgate_dataplane_packets_total", `role="edge"`, `outcome="decap_tx"`)
	}
	encap0, decap0 := edgeCounters()
	const want = 5
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; got < want; i++ {
		if time.Now().After(deadline) {
			out, _ := m.run(20*time.Second, `for ns in "" "nsenter --net=/run/netns/`+agentNetns+`"; do echo "== $ns"; $ns ip -br a; $ns ip neigh; $ns ip r; done
curl -sS http://127.0.0.1:9464/metrics | grep '^azgate_dataplane_packets_total' | grep -v ' 0$'
nsenter --net=/run/netns/`+agentNetns+` curl -sS http://127.0.0.1:9465/metrics | grep '^azgate_dataplane_packets_total' | grep -v ' 0$'`)
			t.Logf("the container's network and the data planes' counters:\n%s", out)
			t.Fatalf("%d of %d UDP echoes from %s:7007 (through edge-a1, host-a1 to g1) in 30s", got, want, eip)
		}
		msg := fmt.Sprintf("azgate nspawn %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 2048)
		k, err := c.Read(buf)
		if err == nil && string(buf[:k]) == msg {
			got++
		}
	}
	// The guest saw the client's own address (1:1 NAT rewrites the
	// destination only).
	if from := <-seen; !strings.HasPrefix(from, clientAddr+":") {
		t.Errorf("the guest got the client's packets from %s, want %s", from, clientAddr)
	}
	// The counters are read from the maps at each scrape.
	encap1, decap1 := edgeCounters()
	if encap1-encap0 < want || decap1-decap0 < want {
		t.Errorf("edge-a1's encap_tx %v -> %v, decap_tx %v -> %v: want each up by %d at least", encap0, encap1, decap0, decap1, want)
	}
	t.Logf("%d echoes through edge-a1 and host-a1; edge encap_tx %v -> %v, decap_tx %v -> %v", got, encap0, encap1, decap0, decap1)

	// TCP too: 256 KiB echoed over one connection, segments both ways
	// translated and tunnelled (their checksums included).
	var ln net.Listener
	if err := w.guest.Do(func() (err error) {
		ln, err = net.Listen("tcp4", guestAddr+":7008")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	var tc net.Conn
	if err := w.client.Do(func() (err error) {
		tc, err = net.DialTimeout("tcp4", eip+":7008", 10*time.Second)
		return err
	}); err != nil {
		t.Fatalf("TCP to %s:7008: %v", eip, err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	sent := make([]byte, 256<<10)
	rand.Read(sent)
	go tc.Write(sent)
	back := make([]byte, len(sent))
	if _, err := io.ReadFull(tc, back); err != nil || !bytes.Equal(back, sent) {
		t.Errorf("TCP echo from %s:7008: %v (the bytes differ: %v)", eip, err, err == nil)
	}
}

// metricSum adds the values of a metric's series having every label
// given (name="value") in a Prometheus text exposition.
func metricSum(exposition, name string, labels ...string) float64 {
	var sum float64
	for _, l := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); ok && err == nil {
			sum += v
		}
	}
	return sum
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
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
	// Pdeathsig: a test process killed midway (a `go test` stopped by
	// hand) halts its container instead of leaving it running with its
	// etcd, Redis and Prometheus. The signal follows the thread that
	// started nspawn, so that thread stays locked and alive until the
	// cleanup, never retired by the runtime while the test runs.
	m.nspwn.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	started, release := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		started <- m.nspwn.Start()
		<-release // the thread ends with this goroutine, after the cleanup
	}()
	if err := <-started; err != nil {
		close(release)
		t.Fatalf("systemd-nspawn: %v", err)
	}
	done := make(chan struct{})
	go func() { m.nspwn.Wait(); close(done) }()
	t.Cleanup(func() {
		defer close(release)
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
