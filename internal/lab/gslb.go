package lab

// The GSLB lab (issue 11; docs/lab.md "The GSLB lab"): three regions of
// the CDN path-computation service on one machine, apart from the region
// lab (its own namespaces, prefix azgg-, and state directory).
//
//	                               core            backbone router (static routes)
//	           _____________________|_____________________
//	          /                     |                     \     o1, o2: origins
//	       eu-rtr                 us-rtr                 ap-rtr   (lab serve, HTTP)
//	  BIRD: ECMP to the servers announcing the region's pathd VIP
//	   /  |  \    \     \     \
//	 s1  s2  s3   db    dns   rly    prb
//
//	sK:  pathd on :7090, a Redis replica on 127.0.0.1:6379, and the
//	     announcer (VIP /32 over BGP while /healthz and Redis answer)
//	db:  the region's Redis primary (password, on its link address)
//	dns: a gslb instance: authoritative for example., one vantage point
//	rly: a relay (lab serve); prb: the region's prober, which finds pathd
//	     through the GSLB name pathd.example and reports every second
//
// Every address is from the benchmarking (198.18.0.0/15) and
// documentation (192.0.2.0/24, 203.0.113.0/24, 2001:db8::/32) ranges;
// nothing links to the machine's network. The regions are dual-stack
// (issue 21): every link but the origins' has an IPv6 /64 beside its
// IPv4 /31, each region a v6 VIP beside its v4 one (the same servers, the
// same announcer, MP-BGP on the same session), the GSLB record a v4 and a
// v6 target per region, the gslb instances listen on both families.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
)

// Defaults of the GSLB lab.
const (
	GSLBPrefix   = "azgg-"
	GSLBStateDir = "/run/azgate-gslblab"
	// GSLBServers is the number of pathd servers per region.
	GSLBServers = 3
	// PathdPort is pathd's port on every server (and so on the VIP).
	PathdPort = 7090
	// GSLBName is the name the probers resolve; GSLBZone its zone.
	GSLBName = "pathd.example"
	GSLBZone = "example"
	// The BGP of a region: its router's AS and its servers' (private
	// ASNs, RFC 6996), with timers short enough that a silently dead
	// server leaves the ECMP group in about 3 s.
	gslbRouterASN = 64900
	gslbServerASN = 64950
	gslbHold      = 3
	// The probes: the GSLB's of every VIP and the announcers' of their
	// server, every 500 ms, down at the 2nd failure, up at the 2nd
	// success.
	gslbProbeInterval = 500 * time.Millisecond
	gslbProbeFall     = 2
	// proberMetricsPort is where a region's prober serves /metrics, on
	// its namespace's loopback.
	proberMetricsPort = 9468
)

// GSLBRegion is one region of the GSLB lab.
type GSLBRegion struct {
	Name     string
	Index    int // 1-based: the third octet of its network
	Lat, Lon float64
}

// GSLBRegions are the lab's regions, with the coordinates the nearest
// policy measures distances between (Frankfurt, Virginia, Singapore): a
// region's probers fall back to the nearest other one.
var GSLBRegions = []GSLBRegion{
	{"eu", 1, 50.1, 8.7},
	{"us", 2, 38.9, -77.0},
	{"ap", 3, 1.35, 103.8},
}

// GSLBOrigins are the origins every prober measures (lab serve on :80).
var GSLBOrigins = []string{"o1", "o2"}

// The k-th (1-based) node of a region's segment: s1..s3, db, dns, rly.
const (
	segDB  = GSLBServers + 1
	segDNS = GSLBServers + 2
	segRly = GSLBServers + 3
)

// RegionVIP is the anycast-free VIP of a region's pathd cluster.
func RegionVIP(r GSLBRegion) netip.Addr {
	return netip.AddrFrom4([4]byte{192, 0, 2, byte(10 * r.Index)})
}

// RegionVIP6 is the region's IPv6 VIP, 2001:db8:10::R0, served by the
// same servers as RegionVIP.
func RegionVIP6(r GSLBRegion) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:10::%d0", r.Index))
}

// The IPv6 side of the lab (docs/lab.md, "The GSLB lab"), 2001:db8::/32:
// the k-th link of region R's segment is 2001:db8:18:R0k::/64 (router
// ::1, node ::2; the region's segments are inside 2001:db8:18:R00::/56),
// its router's link to core 2001:db8:18:c0R::/64 (core ::1, router ::2),
// its prober's link 2001:db8:20R::/64 (router ::1, prober ::10) inside
// the client network 2001:db8:20R::/48 the prefix map places in the
// region.
func segRouter6(r GSLBRegion, k int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:18:%d%02d::1", r.Index, k))
}
func segNode6(r GSLBRegion, k int) netip.Addr { return segRouter6(r, k).Next() }
func segNet6(r GSLBRegion) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("2001:db8:18:%d00::/56", r.Index))
}
func coreSide6(r GSLBRegion) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:18:c0%d::1", r.Index))
}
func rtrUp6(r GSLBRegion) netip.Addr { return coreSide6(r).Next() }

// ProberAddr6 is a region's prober's IPv6 address.
func ProberAddr6(r GSLBRegion) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:20%d::10", r.Index))
}
func proberGW6(r GSLBRegion) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:20%d::1", r.Index))
}

// ProberNet6 is a region's IPv6 client network, in the prefix map: an
// ECS query from inside it is answered with scope 48.
func ProberNet6(r GSLBRegion) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("2001:db8:20%d::/48", r.Index))
}

// DNSAddr6 is a region's gslb instance's IPv6 address.
func DNSAddr6(r GSLBRegion) netip.Addr { return segNode6(r, segDNS) }

// segRouter and segNode are the router's and the node's ends of the k-th
// /31 of a region's segment, 198.18.R.2k/31.
func segRouter(r GSLBRegion, k int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(r.Index), byte(2 * k)})
}
func segNode(r GSLBRegion, k int) netip.Addr { return segRouter(r, k).Next() }

// coreSide and rtrUp are the ends of a region router's link to core.
func coreSide(r GSLBRegion) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 200, byte(2*r.Index - 2)})
}
func rtrUp(r GSLBRegion) netip.Addr { return coreSide(r).Next() }

// ProberAddr is a region's prober address: the region's client network
// 203.0.113.16R/28, which the GSLB's prefix map places in the region.
func ProberAddr(r GSLBRegion) netip.Addr {
	return netip.AddrFrom4([4]byte{203, 0, 113, byte(16*r.Index + 1)})
}
func proberNet(r GSLBRegion) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(16 * r.Index)}), 28)
}

// DNSAddr is a region's gslb instance.
func DNSAddr(r GSLBRegion) netip.Addr { return segNode(r, segDNS) }

// originAddr is origin j's (1-based) address, on its link to core.
func originAddr(j int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 201, byte(2*j + 1)}) }

// ServerNode names server k (1-based) of a region.
func ServerNode(r GSLBRegion, k int) string { return fmt.Sprintf("%s-s%d", r.Name, k) }

// BuildGSLB returns the GSLB lab's topology.
func BuildGSLB(prefix string) *Topology {
	t := &Topology{Prefix: prefix}
	add := func(name, role string) {
		t.Nodes = append(t.Nodes, &Node{Name: name, Netns: prefix + name, Role: role, Addresses: map[string]string{}})
	}
	add("core", "router")
	for _, r := range GSLBRegions {
		rtr := r.Name + "-rtr"
		add(rtr, "router")
		t.Node(rtr).AZ = r.Name
		t.link("core", r.Name, coreSide(r).String()+"/31", rtr, "core", rtrUp(r).String()+"/31", 1500)
		t.addr6("core", r.Name, coreSide6(r).String()+"/64")
		t.addr6(rtr, "core", rtrUp6(r).String()+"/64")
		t.routes = append(t.routes,
			route{rtr, "default", coreSide(r).String(), "core"},
			route{"core", fmt.Sprintf("198.18.%d.0/24", r.Index), rtrUp(r).String(), r.Name},
			route{"core", proberNet(r).String(), rtrUp(r).String(), r.Name},
			route{"core", RegionVIP(r).String() + "/32", rtrUp(r).String(), r.Name},
			route{rtr, "::/0", coreSide6(r).String(), "core"},
			route{"core", segNet6(r).String(), rtrUp6(r).String(), r.Name},
			route{"core", ProberNet6(r).String(), rtrUp6(r).String(), r.Name},
			route{"core", RegionVIP6(r).String() + "/128", rtrUp6(r).String(), r.Name},
		)
		seg := map[int]string{segDB: r.Name + "-db", segDNS: r.Name + "-dns", segRly: r.Name + "-rly"}
		for k := 1; k <= GSLBServers; k++ {
			seg[k] = ServerNode(r, k)
		}
		for k := 1; k <= segRly; k++ {
			n := seg[k]
			add(n, "server")
			t.Node(n).AZ = r.Name
			dev := strings.TrimPrefix(n, r.Name+"-")
			t.link(rtr, dev, segRouter(r, k).String()+"/31", n, "eth0", segNode(r, k).String()+"/31", 1500)
			t.addr6(rtr, dev, segRouter6(r, k).String()+"/64")
			t.addr6(n, "eth0", segNode6(r, k).String()+"/64")
			t.routes = append(t.routes, route{n, "default", segRouter(r, k).String(), "eth0"},
				route{n, "::/0", segRouter6(r, k).String(), "eth0"})
		}
		prb := r.Name + "-prb"
		add(prb, "internet")
		t.Node(prb).AZ = r.Name
		t.link(rtr, "prb", ProberAddr(r).Prev().String()+"/31", prb, "eth0", ProberAddr(r).String()+"/31", 1500)
		t.addr6(rtr, "prb", proberGW6(r).String()+"/64")
		t.addr6(prb, "eth0", ProberAddr6(r).String()+"/64")
		t.routes = append(t.routes, route{prb, "default", ProberAddr(r).Prev().String(), "eth0"},
			route{prb, "::/0", proberGW6(r).String(), "eth0"})
	}
	for j := range GSLBOrigins {
		o := GSLBOrigins[j]
		add(o, "server")
		t.link("core", o, originAddr(j+1).Prev().String()+"/31", o, "eth0", originAddr(j+1).String()+"/31", 1500)
		t.routes = append(t.routes, route{o, "default", originAddr(j + 1).Prev().String(), "eth0"})
	}
	return t
}

// GSLBLab is a running GSLB lab.
type GSLBLab struct {
	*Lab
	// Procs are the processes it started, by "node/what" (a server runs
	// three: pathd, announce and its Redis replica).
	Procs map[string]*Proc `json:"procs"`
}

func (g *GSLBLab) gslbStateFile() string { return filepath.Join(g.Cfg.StateDir, "gslb.json") }
func (g *GSLBLab) secretsDir() string    { return filepath.Join(g.Cfg.StateDir, "secrets") }
func (g *GSLBLab) secret(name string) string {
	return filepath.Join(g.secretsDir(), name)
}

// peerSecret is the name of the peer token regions a and b share (either
// order): pathd takes one token per pair of regions, so a region holding
// its tokens cannot forward as a third (issue 17 part 3). The lab keeps
// every pair's file in one directory; a deployment gives each region only
// its own pairs'.
func peerSecret(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return "peer-token-" + a + "-" + b
}

// GSLBConfig completes a Config for the GSLB lab: its own prefix and
// state directory unless set.
func GSLBConfig(cfg Config) Config {
	if cfg.Prefix == "" || cfg.Prefix == DefaultPrefix {
		cfg.Prefix = GSLBPrefix
	}
	if cfg.StateDir == "" || cfg.StateDir == DefaultStateDir {
		cfg.StateDir = GSLBStateDir
	}
	return cfg
}

// UpGSLB builds the GSLB lab and starts every process; on failure it
// takes down what it built.
func UpGSLB(ctx context.Context, cfg Config) (*GSLBLab, error) {
	cfg = GSLBConfig(cfg)
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cfg.CheckBinaries(); err != nil {
		return nil, err
	}
	g := &GSLBLab{Lab: &Lab{Cfg: cfg, Topo: BuildGSLB(cfg.Prefix)}, Procs: map[string]*Proc{}}
	g.API = "unix://" + g.apiSock()
	if existing, _ := netns.List(cfg.Prefix); len(existing) > 0 {
		return nil, fmt.Errorf("a lab with prefix %q is already up (%d namespaces): run `azgate-lab lab gslb down` first", cfg.Prefix, len(existing))
	}
	if err := dataplane.EnsureBPFFS(); err != nil {
		return nil, err
	}
	if err := g.up(ctx); err != nil {
		g.say("lab gslb up failed: %v; cleaning up", err)
		DownGSLB(cfg)
		return nil, err
	}
	return g, nil
}

// DownGSLB removes the GSLB lab: every process in its namespaces, its
// controller (by PID), the namespaces and the state directory.
func DownGSLB(cfg Config) error { return Down(GSLBConfig(cfg)) }

// OpenGSLB attaches to a running GSLB lab.
func OpenGSLB(cfg Config) (*GSLBLab, error) {
	cfg = GSLBConfig(cfg)
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	g := &GSLBLab{Lab: &Lab{Cfg: cfg, Topo: BuildGSLB(cfg.Prefix)}, Procs: map[string]*Proc{}}
	g.API = "unix://" + g.apiSock()
	b, err := os.ReadFile(g.gslbStateFile())
	if err != nil {
		return nil, fmt.Errorf("no GSLB lab is up (reading %s: %w); run `azgate-lab lab gslb up`", g.gslbStateFile(), err)
	}
	if err := json.Unmarshal(b, &g.Procs); err != nil {
		return nil, fmt.Errorf("%s: %w", g.gslbStateFile(), err)
	}
	return g, nil
}

func (g *GSLBLab) saveProcs() error {
	b, err := json.MarshalIndent(g.Procs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(g.gslbStateFile(), b, 0o600)
}

func (g *GSLBLab) up(ctx context.Context) error {
	for _, d := range []string{g.Cfg.StateDir, g.logDir(), g.secretsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	g.say("building %d namespaces (3 regions, a core router, 2 origins)", len(g.Topo.Nodes))
	if err := g.buildNetwork(); err != nil {
		return err
	}
	if err := g.saveProcs(); err != nil {
		return err
	}
	if err := g.writeSecrets(); err != nil {
		return err
	}
	g.say("starting BIRD in every region's router (ECMP over the servers announcing its VIP)")
	for _, r := range GSLBRegions {
		if err := g.startRegionRouter(r); err != nil {
			return err
		}
	}
	g.say("starting the controller (embedded etcd in %s)", g.dataDir())
	if err := g.startController(ctx); err != nil {
		return err
	}
	c, err := g.Client()
	if err != nil {
		return err
	}
	if _, err := c.Apply(ctx, GSLBDocument()); err != nil {
		return fmt.Errorf("apply the GSLB zone and record: %w", err)
	}
	g.say("starting a Redis primary per region and a replica on every server")
	pw, err := os.ReadFile(g.secret("redis"))
	if err != nil {
		return err
	}
	for _, r := range GSLBRegions {
		if err := g.startRedis(ctx, r, strings.TrimSpace(string(pw))); err != nil {
			return err
		}
	}
	g.say("starting pathd and the announcer on every server, the relays and origins")
	for _, r := range GSLBRegions {
		for k := 1; k <= GSLBServers; k++ {
			if err := g.StartPathd(r, k); err != nil {
				return err
			}
			if err := g.startAnnouncer(r, k); err != nil {
				return err
			}
		}
		if err := g.spawnIn(r.Name+"-rly", "serve", g.Cfg.LabBinary, "lab", "serve", "--name", "rly-"+r.Name, "--http", "0.0.0.0:80", "--echo", ""); err != nil {
			return err
		}
	}
	for _, o := range GSLBOrigins {
		if err := g.spawnIn(o, "serve", g.Cfg.LabBinary, "lab", "serve", "--name", o, "--http", "0.0.0.0:80", "--echo", ""); err != nil {
			return err
		}
	}
	g.say("waiting for every region's VIPs (IPv4 and IPv6) to be routed over its %d servers", GSLBServers)
	for _, r := range GSLBRegions {
		for _, vip := range []netip.Addr{RegionVIP(r), RegionVIP6(r)} {
			if _, err := g.WaitHops(ctx, r, vip, GSLBServers, 60*time.Second); err != nil {
				return err
			}
		}
	}
	g.say("starting a gslb instance per region (a vantage point each) and the probers")
	for _, r := range GSLBRegions {
		if err := g.startGSLB(r); err != nil {
			return err
		}
	}
	for _, r := range GSLBRegions {
		if err := g.waitAnswer(ctx, r, r, DigA, RegionVIP(r), 30*time.Second); err != nil {
			return err
		}
		if err := g.waitAnswer(ctx, r, r, DigAAAA6, RegionVIP6(r), 30*time.Second); err != nil {
			return err
		}
	}
	for _, r := range GSLBRegions {
		if err := g.startProber(r); err != nil {
			return err
		}
	}
	g.say("GSLB lab is up: %d nodes; try `azgate-lab lab gslb demo`", len(g.Topo.Nodes))
	return nil
}

// writeSecrets makes the lab's tokens (the probers', and one per pair of
// regions for pathd's forwards) and Redis password (mode 0600, in a 0700
// directory).
func (g *GSLBLab) writeSecrets() error {
	names := []string{"token", "redis"}
	for i, a := range GSLBRegions {
		for _, b := range GSLBRegions[i+1:] {
			names = append(names, peerSecret(a.Name, b.Name))
		}
	}
	for _, name := range names {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		if err := os.WriteFile(g.secret(name), []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return err
		}
	}
	var pm strings.Builder
	pm.WriteString("# the GSLB lab's client networks (lab/gslb.go)\n")
	for _, r := range GSLBRegions {
		fmt.Fprintf(&pm, "%s %s %g %g\n", proberNet(r), r.Name, r.Lat, r.Lon)
		fmt.Fprintf(&pm, "%s %s %g %g\n", ProberNet6(r), r.Name, r.Lat, r.Lon)
	}
	return os.WriteFile(filepath.Join(g.Cfg.StateDir, "prefix-map"), []byte(pm.String()), 0o600)
}

// GSLBDocument is the lab's DNS zone and its GSLB record: pathd.example,
// nearest healthy region, a v4 and a v6 target per region (A answers
// from the first, AAAA from the second, each with its own health), each
// VIP probed over HTTP on /healthz in its own family.
func GSLBDocument() *model.Document {
	d := &model.Document{}
	z := model.DNSZone{Name: GSLBZone, NS: []string{"ns1.example."}, TTL: 60}
	for _, r := range GSLBRegions {
		z.Records = append(z.Records, model.ZoneRecord{Name: "ns1", Type: "A", Value: DNSAddr(r).String()},
			model.ZoneRecord{Name: "ns1", Type: "AAAA", Value: DNSAddr6(r).String()})
	}
	d.DNSZones = append(d.DNSZones, z)
	rec := model.GSLBRecord{Name: GSLBName, Zone: GSLBZone, Policy: "nearest", TTL: 1,
		Probe: &model.GSLBProbe{Kind: "http", Port: PathdPort, Path: "/healthz",
			Interval: model.Duration(gslbProbeInterval), Timeout: model.Duration(400 * time.Millisecond), Rise: 2, Fall: gslbProbeFall}}
	for _, r := range GSLBRegions {
		rec.Targets = append(rec.Targets, model.GSLBTarget{VIP: RegionVIP(r), Region: r.Name, Weight: 1, Order: r.Index, Lat: r.Lat, Lon: r.Lon},
			model.GSLBTarget{VIP: RegionVIP6(r), Region: r.Name, Weight: 1, Order: r.Index, Lat: r.Lat, Lon: r.Lon})
	}
	d.GSLBRecords = append(d.GSLBRecords, rec)
	return d
}

// spawnIn starts argv in a node's namespace, detached, its output in the
// lab's logs, and records it as "node/what".
func (g *GSLBLab) spawnIn(node, what string, argv ...string) error {
	n := g.Topo.Node(node)
	if n == nil {
		return fmt.Errorf("no node %q", node)
	}
	p, err := g.spawn(n, what, argv...)
	if err != nil {
		return err
	}
	g.Procs[node+"/"+what] = p
	return g.saveProcs()
}

// spawnRole starts a role on node as its unit does (roleCommand): args
// are the role, then its flags.
func (g *GSLBLab) spawnRole(node, what string, args ...string) error {
	n := g.Topo.Node(node)
	if n == nil {
		return fmt.Errorf("no node %q", node)
	}
	c, err := g.roleCommand(node+"-"+what, args)
	if err != nil {
		return err
	}
	if err := checkConfig(n.Netns, c.Check); err != nil {
		return fmt.Errorf("%s on %s: %w", what, node, err)
	}
	return g.spawnIn(node, what, c.Start...)
}

// Kill sends sig to a process the lab started, by PID, after checking the
// PID is still that process: its command line, or for a redis-server,
// which rewrites its command line (its process title), its working
// directory, where bwstore.StartServer runs it (isBWServer).
func (g *GSLBLab) Kill(key string, sig os.Signal) error {
	p, ok := g.Procs[key]
	if !ok {
		return fmt.Errorf("no lab process %q", key)
	}
	same := cmdlineHas(p.PID, strings.Fields(p.Cmd)...)
	if strings.HasSuffix(key, "/redis") {
		same = isBWServer(p.PID, filepath.Dir(p.Log))
	}
	if !alive(p.PID) || !same {
		return fmt.Errorf("%s (pid %d) is not running", key, p.PID)
	}
	pr, err := os.FindProcess(p.PID)
	if err != nil {
		return err
	}
	return pr.Signal(sig)
}

// cmdlineHas says whether a process's command line holds every word.
func cmdlineHas(pid int, words ...string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for _, w := range words {
		found := false
		for _, a := range args {
			if a == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// GSLBBirdConfig is a region router's BIRD configuration: one passive
// iBGP-free session (eBGP) per server carrying IPv4 and IPv6 unicast,
// every route to the kernel, equal routes merged (ECMP).
func GSLBBirdConfig(r GSLBRegion) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# azgate GSLB lab: region %s's router (generated by internal/lab/gslb.go)
log stderr all;
router id %v;

protocol device { scan time 10; }

protocol kernel {
	ipv4 { import none; export all; };
	merge paths on;
	scan time 10;
}

protocol kernel {
	ipv6 { import none; export all; };
	merge paths on;
	scan time 10;
}

template bgp server {
	local as %d;
	passive on;
	hold time %d;
	keepalive time 1;
	error wait time 1, 2;
	error forget time 10;
	ipv4 { import where net = %v/32; export none; };
	# the IPv6 VIP over MP-BGP on the same (IPv4) session, the server's
	# IPv6 address on the segment as next hop
	ipv6 { import where net = %v/128; export none; };
}
`, r.Name, rtrUp(r), gslbRouterASN+r.Index, gslbHold, RegionVIP(r), RegionVIP6(r))
	for k := 1; k <= GSLBServers; k++ {
		fmt.Fprintf(&b, "\nprotocol bgp s%d from server {\n\tlocal %v as %d;\n\tneighbor %v as %d;\n}\n",
			k, segRouter(r, k), gslbRouterASN+r.Index, segNode(r, k), gslbServerASN+r.Index)
	}
	return b.String()
}

func (g *GSLBLab) birdFile(r GSLBRegion, ext string) string {
	return filepath.Join(g.Cfg.StateDir, "bird-"+r.Name+"."+ext)
}

// startRegionRouter turns on L4 multipath hashing in the region's router,
// adds the unreachable fallback of its VIP (a region with no server
// announcing answers ICMP unreachable at once rather than looping the VIP
// back to core) and starts BIRD.
func (g *GSLBLab) startRegionRouter(r GSLBRegion) error {
	n := g.Topo.Node(r.Name + "-rtr")
	for k, v := range map[string]string{"net.ipv4.fib_multipath_hash_policy": "1", "net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
		"net.ipv6.fib_multipath_hash_policy": "1", "net.ipv6.conf.all.ignore_routes_with_linkdown": "1"} {
		if err := netns.Sysctl(n.Netns, k, v); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	for _, p := range []netip.Prefix{netip.PrefixFrom(RegionVIP(r), 32), netip.PrefixFrom(RegionVIP6(r), 128)} {
		if out, err := netns.Command(n.Netns, "ip", family(p.Addr()), "route", "add", "unreachable", p.String(), "metric", "4000").CombinedOutput(); err != nil {
			return fmt.Errorf("%s: unreachable fallback for %v: %v: %s", n.Name, p, err, out)
		}
	}
	if err := os.WriteFile(g.birdFile(r, "conf"), []byte(GSLBBirdConfig(r)), 0o600); err != nil {
		return err
	}
	return g.spawnIn(n.Name, "bird", "bird", "-f", "-c", g.birdFile(r, "conf"), "-s", g.birdFile(r, "ctl"), "-P", g.birdFile(r, "pid"))
}

// startRedis starts the region's primary on its db node's link address
// and a replica on 127.0.0.1 in every server; bwstore.StartServer waits
// until each answers on its unix socket. Only the lab's namespaces reach
// the TCP listeners, and they need the password.
func (g *GSLBLab) startRedis(ctx context.Context, r GSLBRegion, pw string) error {
	primary := netip.AddrPortFrom(segNode(r, segDB), 6379)
	start := func(node string, sc bwstore.ServerConfig) error {
		sc.Dir = filepath.Join(g.Cfg.StateDir, "redis", node)
		sc.Netns = g.Topo.Node(node).Netns
		sc.Password = pw
		sc.MaxMemoryMB = 64
		if err := os.MkdirAll(filepath.Dir(sc.Dir), 0o700); err != nil {
			return err
		}
		s, err := bwstore.StartServer(ctx, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", node, err)
		}
		g.Procs[node+"/redis"] = redisProc(sc.Dir, s.PID)
		return g.saveProcs()
	}
	if err := start(r.Name+"-db", bwstore.ServerConfig{TCP: primary.String()}); err != nil {
		return err
	}
	for k := 1; k <= GSLBServers; k++ {
		if err := start(ServerNode(r, k), bwstore.ServerConfig{TCP: "127.0.0.1:6379", ReplicaOf: primary.String(), PrimaryPassword: pw}); err != nil {
			return err
		}
	}
	return nil
}

// redisProc records a redis-server bwstore.StartServer started in dir
// (Kill identifies it by that directory: the log's).
func redisProc(dir string, pid int) *Proc {
	return &Proc{Cmd: "redis-server " + filepath.Join(dir, "redis.conf"), PID: pid, Log: filepath.Join(dir, "redis.log")}
}

// StartPathd starts pathd on server k of a region: on every address of
// its namespace at PathdPort, both families (the VIPs routed to it, and
// its own), the
// region's primary, its local replica, the other regions as peers.
func (g *GSLBLab) StartPathd(r GSLBRegion, k int) error {
	node := ServerNode(r, k)
	args := []string{"pathd", "--listen", fmt.Sprintf("[::]:%d", PathdPort),
		"--region", r.Name, "--instance", fmt.Sprintf("s%d", k),
		"--token-file", g.secret("token"),
		"--redis", "redis://" + netip.AddrPortFrom(segNode(r, segDB), 6379).String(),
		"--redis-password-file", g.secret("redis"), "--redis-replica", "redis://127.0.0.1:6379",
		"--report-interval", "1s", "--recompute", "1s"}
	for _, o := range GSLBRegions {
		if o != r {
			args = append(args, "--peer", fmt.Sprintf("%s=http://%v:%d", o.Name, RegionVIP(o), PathdPort),
				"--peer-token-file", o.Name+"="+g.secret(peerSecret(r.Name, o.Name)))
		}
	}
	// The VIPs on lo: what the router sends to this server is local.
	if err := g.VIPOnLo(r, k, RegionVIP(r), true); err != nil {
		return err
	}
	if err := g.VIPOnLo(r, k, RegionVIP6(r), true); err != nil {
		return err
	}
	return g.spawnRole(node, "pathd", args...)
}

// VIPOnLo puts a VIP on server k's lo (on) or takes it off: without it
// the router still sends the VIP's packets there (the announcer does not
// check it) but nothing answers them, so the GSLB's probes of it fail.
func (g *GSLBLab) VIPOnLo(r GSLBRegion, k int, vip netip.Addr, on bool) error {
	op := "replace"
	if !on {
		op = "del"
	}
	node := ServerNode(r, k)
	if out, err := netns.Command(g.Topo.Node(node).Netns, "ip", family(vip), "addr", op, netip.PrefixFrom(vip, vip.BitLen()).String(), "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("%s: VIP %v on lo (%s): %v: %s", node, vip, op, err, out)
	}
	return nil
}

// family is ip's family flag for an address.
func family(a netip.Addr) string {
	if a.Is4() {
		return "-4"
	}
	return "-6"
}

// startAnnouncer starts the announcer of server k: both VIPs to the
// region's router (the v6 one over MP-BGP on the IPv4 session, its
// IPv6 segment address as next hop) while pathd's /healthz and the local
// Redis answer.
func (g *GSLBLab) startAnnouncer(r GSLBRegion, k int) error {
	return g.spawnRole(ServerNode(r, k), "announce", "announce",
		"--vip", RegionVIP(r).String()+"/32", "--vip", RegionVIP6(r).String()+"/128", "--asn", strconv.Itoa(gslbServerASN+r.Index),
		"--peer", fmt.Sprintf("%v:%d", segRouter(r, k), gslbRouterASN+r.Index),
		"--next-hop", segNode(r, k).String(), "--next-hop6", segNode6(r, k).String(), "--local-address", segNode(r, k).String(),
		"--check", fmt.Sprintf("http://127.0.0.1:%d/healthz", PathdPort), "--check", "tcp://127.0.0.1:6379",
		"--interval", "500ms", "--timeout", "400ms", "--rise", "2", "--fall", "2", "--hold", fmt.Sprintf("%ds", gslbHold))
}

// startGSLB starts a region's gslb instance: authoritative on its
// addresses (IPv4 and IPv6), port 53, its vantage point named after the
// region.
func (g *GSLBLab) startGSLB(r GSLBRegion) error {
	return g.spawnRole(r.Name+"-dns", "gslb", "gslb", "--name", "dns-"+r.Name, "--vantage", r.Name,
		"--listen", netip.AddrPortFrom(DNSAddr(r), 53).String(), "--listen", netip.AddrPortFrom(DNSAddr6(r), 53).String(),
		"--prefix-map", filepath.Join(g.Cfg.StateDir, "prefix-map"),
		"--etcd-endpoints", g.etcdFlag(), "--view-interval", "500ms",
		"--metrics-listen", "127.0.0.1:9467")
}

// ProberV6 says whether a region's prober reports over IPv6 (ap's: it
// resolves pathd.example AAAA first, through the gslb instances' IPv6
// addresses, and posts to the region's v6 VIP); the others use IPv4.
func ProberV6(r GSLBRegion) bool { return r.Name == "ap" }

// ReportVIP is the VIP a region's prober reports to while its region is
// healthy, or, for another region's, while it reports there.
func ReportVIP(prober, to GSLBRegion) netip.Addr {
	if ProberV6(prober) {
		return RegionVIP6(to)
	}
	return RegionVIP(to)
}

// startProber starts a region's prober: it measures every relay and
// origin each second and reports to pathd.example, resolved through its
// region's gslb first, then the others'.
func (g *GSLBLab) startProber(r GSLBRegion) error {
	args := []string{"prober", "--node", "edge-" + r.Name, "--interval", "1s", "--probes", "3", "--timeout", "500ms",
		"--report-url", fmt.Sprintf("http://%s:%d/v1/reports", GSLBName, PathdPort),
		"--token-file", g.secret("token"), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", proberMetricsPort)}
	dnsAddr := DNSAddr
	if ProberV6(r) {
		dnsAddr = DNSAddr6
		args = append(args, "--report-family", "ipv6")
	}
	args = append(args, "--dns", netip.AddrPortFrom(dnsAddr(r), 53).String())
	for _, o := range GSLBRegions {
		if o != r {
			args = append(args, "--dns", netip.AddrPortFrom(dnsAddr(o), 53).String())
		}
	}
	for _, o := range GSLBRegions {
		args = append(args, "--relay", fmt.Sprintf("rly-%s=%v:80", o.Name, segNode(o, segRly)))
	}
	for j, o := range GSLBOrigins {
		args = append(args, "--origin", fmt.Sprintf("%s=%v:80", o, originAddr(j+1)))
	}
	return g.spawnRole(r.Name+"-prb", "prober", args...)
}

// errNoRoute: the VIP has no route through servers yet.
var errNoRoute = errors.New("no route")
