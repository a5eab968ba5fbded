package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/azgate/azgate/internal/bwstore"
	"gopkg.in/yaml.v3"
)

// TestGSLBKillChecksIdentity: GSLBLab.Kill signals a process it recorded
// while the PID is still that process, a redis-server (whose command line
// is its process title, not its argv) included, and refuses a PID that is
// another process (this test's own, recorded as a pathd).
func TestGSLBKillChecksIdentity(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("no redis-server binary: scripts/setup.sh installs it (apt-get install redis-server)")
		}
		t.Skip("no redis-server binary (apt-get install redis-server) and not root")
	}
	base, err := os.MkdirTemp("", "azgt-gk-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "eu-db")
	s, err := bwstore.StartServer(context.Background(), bwstore.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	g := &GSLBLab{Procs: map[string]*Proc{
		"eu-db/redis": redisProc(dir, s.PID),
		"eu-s1/pathd": {Cmd: "pathd --listen 0.0.0.0:7090", PID: os.Getpid()},
		"eu-s2/redis": redisProc(filepath.Join(base, "eu-s2"), s.PID),
	}}
	if err := g.Kill("eu-db/redis", syscall.Signal(0)); err != nil {
		t.Errorf("Kill of the lab's redis-server: %v", err)
	}
	for _, key := range []string{"eu-s1/pathd", "eu-s2/redis", "eu-s3/pathd"} {
		if err := g.Kill(key, syscall.Signal(0)); err == nil {
			t.Errorf("Kill(%s) signalled pid %d, which is not that process", key, g.Procs[key].PID)
		}
	}
}

// TestGSLBDualStack: the GSLB lab is dual-stack (issue 21). Every node but
// the origins has an IPv6 address on each interface that has an IPv4 one,
// all from 2001:db8::/32 and none twice; the record has a v4 and a v6
// target per region and, with the zone, passes the model's validation;
// every region's router imports its v6 VIP's /128 over MP-BGP into the
// kernel; each announcer announces both VIPs (a list in its file), each
// gslb listens on both families, and the prefix map places each region's
// IPv6 client network.
func TestGSLBDualStack(t *testing.T) {
	topo := BuildGSLB("x-")
	doc6 := netip.MustParsePrefix("2001:db8::/32")
	seen := map[netip.Addr]string{}
	for _, n := range topo.Nodes {
		if slices.Contains(GSLBOrigins, n.Name) {
			continue
		}
		for dev := range n.Addresses {
			if n.Name == "core" && slices.Contains(GSLBOrigins, dev) {
				continue // the origins are IPv4 only
			}
			cidr, ok := n.Addresses6[dev]
			if !ok {
				t.Errorf("%s/%s has no IPv6 address", n.Name, dev)
				continue
			}
			p := netip.MustParsePrefix(cidr)
			if !doc6.Contains(p.Addr()) || p.Bits() != 64 {
				t.Errorf("%s/%s: %v, want a /64 in %v", n.Name, dev, p, doc6)
			}
			if other, dup := seen[p.Addr()]; dup {
				t.Errorf("%v on %s/%s and %s", p.Addr(), n.Name, dev, other)
			}
			seen[p.Addr()] = n.Name + "/" + dev
		}
	}
	for _, r := range GSLBRegions {
		if got := seen[DNSAddr6(r)]; got != r.Name+"-dns/eth0" {
			t.Errorf("%s's gslb address %v is on %q", r.Name, DNSAddr6(r), got)
		}
		if got := seen[ProberAddr6(r)]; got != r.Name+"-prb/eth0" || !ProberNet6(r).Contains(ProberAddr6(r)) {
			t.Errorf("%s's prober address %v is on %q, in %v", r.Name, ProberAddr6(r), got, ProberNet6(r))
		}
		if !doc6.Contains(RegionVIP6(r)) || seen[RegionVIP6(r)] != "" {
			t.Errorf("%s's v6 VIP %v: not documentation or on a link (%q)", r.Name, RegionVIP6(r), seen[RegionVIP6(r)])
		}
		bird := GSLBBirdConfig(r)
		for _, want := range []string{"ipv6 { import none; export all; };", fmt.Sprintf("ipv6 { import where net = %v/128; export none; };", RegionVIP6(r))} {
			if !strings.Contains(bird, want) {
				t.Errorf("%s's BIRD configuration lacks %q", r.Name, want)
			}
		}
	}
	d := GSLBDocument()
	for _, z := range d.DNSZones {
		z.Defaults()
		if errs := z.Validate(); len(errs) > 0 {
			t.Errorf("zone %s: %v", z.Name, errs)
		}
	}
	rec := d.GSLBRecords[0]
	rec.Defaults()
	if errs := rec.Validate(); len(errs) > 0 {
		t.Errorf("record %s: %v", rec.Name, errs)
	}
	fam := map[string][2]bool{}
	for _, tg := range rec.Targets {
		f := fam[tg.Region]
		if tg.VIP.Is4() {
			f[0] = tg.VIP == RegionVIP(regionByName(t, tg.Region))
		} else {
			f[1] = tg.VIP == RegionVIP6(regionByName(t, tg.Region))
		}
		fam[tg.Region] = f
	}
	for _, r := range GSLBRegions {
		if fam[r.Name] != [2]bool{true, true} {
			t.Errorf("%s: targets v4/v6 %v, want its two VIPs", r.Name, fam[r.Name])
		}
	}

	g := &GSLBLab{Lab: &Lab{Cfg: Config{StateDir: t.TempDir(), Binary: "/opt/lab/azgate"}, Topo: topo}, Procs: map[string]*Proc{}}
	if err := os.MkdirAll(g.secretsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := g.writeSecrets(); err != nil {
		t.Fatal(err)
	}
	pm, err := os.ReadFile(filepath.Join(g.Cfg.StateDir, "prefix-map"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range GSLBRegions {
		if want := fmt.Sprintf("\n%v %s ", ProberNet6(r), r.Name); !strings.Contains(string(pm), want) {
			t.Errorf("prefix map %q lacks %q", pm, want)
		}
	}
}

func regionByName(t *testing.T, name string) GSLBRegion {
	for _, r := range GSLBRegions {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no region %q", name)
	return GSLBRegion{}
}

// TestRoleConfigListFlagsDualStack: announce's vip, gslb's and pathd's
// listen are lists in the role files (one IPv4 and one IPv6 each in the
// GSLB lab), not the last value given.
func TestRoleConfigListFlagsDualStack(t *testing.T) {
	for _, c := range []struct {
		args []string
		key  string
		want []string
	}{
		{[]string{"announce", "--vip", "192.0.2.10/32", "--vip", "2001:db8:10::10/128", "--asn", "64951"}, "vip", []string{"192.0.2.10/32", "2001:db8:10::10/128"}},
		{[]string{"gslb", "--listen", "198.18.1.11:53", "--listen", "[2001:db8:18:105::2]:53"}, "listen", []string{"198.18.1.11:53", "[2001:db8:18:105::2]:53"}},
		{[]string{"pathd", "--listen", "[::]:7090"}, "listen", []string{"[::]:7090"}},
	} {
		b, err := roleConfig(c.args)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		l, ok := m[c.key].([]any)
		var got []string
		for _, v := range l {
			got = append(got, fmt.Sprint(v))
		}
		if !ok || !slices.Equal(got, c.want) {
			t.Errorf("%s: %s is %#v in %s, want the list %q", c.args[0], c.key, m[c.key], b, c.want)
		}
	}
}

// TestParseDig: the lab reads dig's answer section and the ECS scope of
// its OPT pseudo-section; an answer without the type is an error.
func TestParseDig(t *testing.T) {
	out := `;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1
;; OPT PSEUDOSECTION:
; EDNS: version: 0, flags:; udp: 1232
; CLIENT-SUBNET: 2001:db8:201:ff00::/56/48
;; ANSWER SECTION:
pathd.example.		1	IN	AAAA	2001:db8:10::10
`
	a, err := parseDig(out, "AAAA")
	if err != nil || a.Addr != netip.MustParseAddr("2001:db8:10::10") || a.Scope != 48 {
		t.Errorf("parseDig: %+v, %v; want 2001:db8:10::10 scope 48", a, err)
	}
	a, err = parseDig("pathd.example.\t1\tIN\tA\t192.0.2.10\n", "A")
	if err != nil || a.Addr != netip.MustParseAddr("192.0.2.10") || a.Scope != -1 {
		t.Errorf("parseDig without ECS: %+v, %v", a, err)
	}
	if a, err := parseDig(out, "A"); err == nil {
		t.Errorf("parseDig of an AAAA answer for A: %+v, no error", a)
	}
}
