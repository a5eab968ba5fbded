//go:build !node

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
)

func TestServiceCLI(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")

	out := must(t, s, "service", "create", "web", "--vip", "198.51.100.20", "--mode", "encap",
		"--listener", "tcp:80=web", "--listener", "tcp:8000-8100=dns", "--listener", "udp:any=dns",
		"--backend", "web=az1-h1/g1:8080", "--backend", "web=az2-h1/g1:8080@2", "--backend", "dns=az1-h1/g2",
		"--health", "web=http:/healthz,interval=1s,fall=2")
	if !strings.Contains(out, "service web created (revision") {
		t.Errorf("create: %q", out)
	}
	var v model.Service
	if err := json.Unmarshal([]byte(must(t, s, "service", "get", "web", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	h := v.Pools[0].Health
	if len(v.Listeners) != 3 || v.Listeners[1].PortEnd != 8100 || !v.Listeners[2].AnyPort() || len(v.Pools) != 2 ||
		*v.Pools[0].Backends[1].Weight != 2 || h.Path != "/healthz" || h.Interval != model.Duration(time.Second) || h.Fall != 2 || h.Timeout != model.Duration(500*time.Millisecond) {
		t.Errorf("stored %+v, health %+v", v, h)
	}
	out = must(t, s, "service", "get", "web")
	for _, want := range []string{"198.51.100.20", "tcp:8000-8100", "udp:any", "az2-h1/g1:8080", "http:/healthz,interval=1s,timeout=500ms,rise=2,fall=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("get does not show %q:\n%s", want, out)
		}
	}
	out = must(t, s, "service", "list")
	if !strings.Contains(out, "tcp:80=web,tcp:8000-8100=dns,udp:any=dns") || !strings.Contains(out, "encap") {
		t.Errorf("list:\n%s", out)
	}

	t.Run("nat", func(t *testing.T) {
		must(t, s, "service", "create", "dmz", "--vip", "198.51.100.30", "--mode", "nat", "--table-size", "1009",
			"--listener", "tcp:443=tls", "--backend", "tls=198.19.11.1:8443", "--backend", "tls=198.19.11.2:8443@0", "--health", "tls=tcp,port=9000")
		var d model.Service
		json.Unmarshal([]byte(must(t, s, "service", "get", "dmz", "--json")), &d)
		if d.TableSize != 1009 || d.Pools[0].Backends[0].Address.String() != "198.19.11.1" || *d.Pools[0].Backends[1].Weight != 0 || d.Pools[0].Health.Port != 9000 {
			t.Errorf("nat service %+v", d)
		}
		must(t, s, "service", "delete", "dmz")
	})

	t.Run("backends", func(t *testing.T) {
		out := must(t, s, "service", "backend", "add", "web", "web", "az1-h1/g2@3")
		if !strings.Contains(out, "service web updated") {
			t.Errorf("add: %q", out)
		}
		out = must(t, s, "service", "drain", "web", "web", "az1-h1/g2")
		if !strings.Contains(out, "backend az1-h1/g2 weight 0") {
			t.Errorf("drain: %q", out)
		}
		must(t, s, "service", "weight", "web", "web", "az1-h1/g2", "7")
		json.Unmarshal([]byte(must(t, s, "service", "get", "web", "--json")), &v)
		if b := v.Pools[0].Backends[2]; b.Key() != "az1-h1/g2" || *b.Weight != 7 {
			t.Errorf("backend %+v", b)
		}
		must(t, s, "service", "backend", "remove", "web", "web", "az1-h1/g2")
		if _, err := azgate(t, s, "", "service", "backend", "remove", "web", "web", "az1-h1/g2"); err == nil || !strings.Contains(err.Error(), `no backend "az1-h1/g2"`) {
			t.Errorf("remove twice: %v", err)
		}
	})

	// az2-h1/g1:8080 goes down: one edge reports it, 1 of 1 is a majority.
	ctx := context.Background()
	cli := s.Store().Client
	const down = "az2-h1/g1:8080"
	if _, err := cli.Put(ctx, model.HealthReportKey("edge-a1", "web", "web", down), `{"up": false, "since": "2026-12-02T15:04:05Z", "detail": "connection refused"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		var h model.Health
		out, err := azgate(t, s, "", "service", "status", "web", "--json")
		if err != nil {
			return false
		}
		var st struct{ Health *model.Health }
		json.Unmarshal([]byte(out), &st)
		if st.Health != nil {
			h = *st.Health
		}
		return h.IsDown("web", down)
	})

	t.Run("status", func(t *testing.T) {
		// edge-a1 holds the expected table of pool web, edge-a2 another.
		get := func() *model.Service {
			var v model.Service
			json.Unmarshal([]byte(must(t, s, "service", "get", "web", "--json")), &v)
			return &v
		}
		v := get()
		p, _ := v.Pool("web")
		health := &model.Health{Service: "web", Down: map[string][]string{"web": {down}}}
		var hosts []model.Host
		if err := json.Unmarshal([]byte(must(t, s, "host", "list", "--json")), &hosts); err != nil {
			t.Fatal(err)
		}
		pl := planOf(nil, hosts, v, health, flowhash.DefaultHashSeed).Pool("web/" + p.Name)
		if pl == nil {
			t.Fatal("pool web/web is not in the plan")
		}
		sum := fmt.Sprintf("%016x", pl.Table.Checksum())
		for e, cs := range map[string]string{"edge-a1": sum, "edge-a2": "0000000000000001"} {
			b, _ := json.Marshal(model.NodeStatus{Role: "edge", Name: e, AppliedRevision: 12, Updated: time.Now(),
				Tables: map[string]model.TableStatus{"web/web": {Checksum: cs, Backends: 2, Healthy: 1, M: 65537}}})
			if _, err := cli.Put(ctx, "/azgate/status/edge/"+e, string(b)); err != nil {
				t.Fatal(err)
			}
		}
		out := must(t, s, "service", "status", "web")
		lines := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				lines[f[0]+" "+f[1]] = l
			}
		}
		for key, want := range map[string][]string{
			"web az2-h1/g1:8080": {"down", "1 down, 0 up", "edge-a1: connection refused"},
			"web az1-h1/g1:8080": {" up ", "none"},
			"web edge-a1":        {sum, "65537", "yes"},
			"web edge-a2":        {"0000000000000001", " no"},
			"dns edge-a1":        {"no (no table)"},
		} {
			for _, w := range want {
				if !strings.Contains(lines[key], w) {
					t.Errorf("row %q lacks %q: %q\n%s", key, w, lines[key], out)
				}
			}
		}
		if !strings.Contains(out, "pool web: expected checksum "+sum) || !strings.Contains(out, "edges agree with each other: no") {
			t.Errorf("status notes:\n%s", out)
		}
	})

	t.Run("lookup", func(t *testing.T) {
		// Independently: the table of pool web with its down backend failed.
		m := uint64(model.DefaultTableSize)
		built, err := maglev.Build([]maglev.Backend{{Key: "az1-h1/g1:8080", Weight: 1}, {Key: down, Weight: 2}}, m, flowhash.DefaultHashSeed)
		if err != nil {
			t.Fatal(err)
		}
		failed := built.Fail(map[string]bool{down: true})
		moved := 0
		for sport := uint16(40000); sport < 40040; sport++ {
			tuple := flowhash.Tuple{Src: netip.MustParseAddr("203.0.113.10"), Dst: netip.MustParseAddr("198.51.100.20"), SrcPort: sport, DstPort: 80, Proto: 6}
			hash := flowhash.Hash4(tuple, flowhash.DefaultHashSeed)
			want, _ := failed.Lookup(hash)
			first, _ := built.Lookup(hash)
			var res lookupResult
			flow := fmt.Sprintf("tcp:203.0.113.10:%d-198.51.100.20:80", sport)
			if err := json.Unmarshal([]byte(must(t, s, "service", "lookup", "web", "--flow", flow, "--json")), &res); err != nil {
				t.Fatal(err)
			}
			if res.Backend != want.Key || res.Hash != hash || res.Slot != uint64(hash)%m || res.Listener != "tcp:80" || res.Target != "guest az1-h1/g1 port 8080 (NVGRE to its host)" {
				t.Errorf("%s: %+v, want %s", flow, res, want.Key)
			}
			if first.Key == down {
				moved++
				if res.FirstChoice != down {
					t.Errorf("%s: first choice %q, want %s", flow, res.FirstChoice, down)
				}
			}
		}
		if moved == 0 {
			t.Error("no flow had the down backend as its first choice (weight 2 of 3): the test proves little")
		}
		out := must(t, s, "service", "lookup", "web", "--flow", "udp:203.0.113.10:5353-198.51.100.20:53")
		if !strings.Contains(out, "udp:any -> pool dns") || !strings.Contains(out, "az1-h1/g2") || !strings.Contains(out, "of 65537") {
			t.Errorf("lookup text:\n%s", out)
		}
		// Another seed, another hash.
		var a, b lookupResult
		json.Unmarshal([]byte(must(t, s, "service", "lookup", "web", "--flow", "tcp:203.0.113.10:1-198.51.100.20:80", "--json")), &a)
		json.Unmarshal([]byte(must(t, s, "service", "lookup", "web", "--flow", "tcp:203.0.113.10:1-198.51.100.20:80", "--json", "--hash-seed", "7")), &b)
		if a.Hash == b.Hash || b.Seed != 7 || a.Seed != flowhash.DefaultHashSeed {
			t.Errorf("seeds: %+v %+v", a, b)
		}
	})
}

func TestServiceCLIErrors(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	create := []string{"service", "create", "web", "--vip", "198.51.100.20", "--mode", "encap"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(create, "--listener", "tcp:80"), `--listener "tcp:80": no pool`},
		{append(create, "--listener", "tcp:http=web"), `port "http" is not 1-65535 or any`},
		{append(create, "--listener", "tcp:0=web"), `port "0" is not 1-65535 or any`},
		{append(create, "--listener", "tcp:10-x=web"), `port "x" is not 1-65535`},
		{append(create, "--listener", "tcp:80=web", "--backend", "az1-h1/g1"), `--backend "az1-h1/g1": want POOL=BACKEND`},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1@x"), `weight "x" is not a number`},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=nohost"), `"nohost" is neither HOST/GUEST (encap) nor an IP address (nat)`},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1", "--health", "web=tcp:x"), "a tcp check takes no :ARG"},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1", "--health", "web=tcp,interval=2"), `interval "2" is not a duration`},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1", "--health", "web=tcp,colour=red"), `unknown key "colour"`},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1", "--health", "web=tcp", "--health", "web=udp"), "pool web has a check already"},
		// The controller's checks, with the field at fault.
		{append(create, "--listener", "sctp:80=web", "--backend", "web=az1-h1/g1"), `listeners[0].protocol: "sctp": want tcp or udp`},
		{append(create, "--listener", "tcp:80=web", "--listener", "tcp:70-90=web", "--backend", "web=az1-h1/g1"), "listeners[1]: tcp:70-90 overlaps listeners[0] (tcp:80)"},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=198.19.1.1"), "pools[0].backends[0].address: an encap backend is a guest"},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az9-h1/g1"), `pools[0].backends[0].host: host "az9-h1" does not exist`},
		{append(create, "--listener", "tcp:80=web", "--pool", "spare", "--backend", "web=az1-h1/g1"), "pools[0].backends: at least one backend is required"},
		{append(create, "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1", "--table-size", "1000"), "tableSize: 1000 is not a prime (try 1009)"},
		{[]string{"service", "lookup", "web", "--flow", "tcp:1.2.3.4:5-198.51.100.20:80"}, `service "web" not found`},
		{[]string{"service", "lookup", "web", "--flow", "icmp:1.2.3.4:5-198.51.100.20:80"}, `protocol "icmp" is not tcp or udp`},
		{[]string{"service", "lookup", "web", "--flow", "tcp:1.2.3.4:5"}, "no '-' between source and destination"},
		{[]string{"service", "weight", "web", "web", "k", "x"}, `weight "x" is not a number`},
	} {
		t.Run(strings.Join(tc.args[3:], " "), func(t *testing.T) {
			out, err := azgate(t, s, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (output %q), want one saying %q", err, out, tc.want)
			}
		})
	}

	must(t, s, "service", "create", "web", "--vip", "198.51.100.20", "--mode", "encap", "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"service", "lookup", "web", "--flow", "tcp:1.2.3.4:5-198.51.100.21:80"}, "the flow goes to 198.51.100.21, not to service web's VIP 198.51.100.20"},
		{[]string{"service", "lookup", "web", "--flow", "tcp:1.2.3.4:5-198.51.100.20:81"}, "service web has no listener for tcp port 81"},
		{[]string{"service", "create", "web", "--vip", "198.51.100.20", "--mode", "encap", "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1"}, `service "web" already exists`},
		{[]string{"host", "guest", "remove", "az1-h1", "g1"}, "guest az1-h1/g1 is a backend of service web"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := azgate(t, s, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (output %q), want one saying %q", err, out, tc.want)
			}
		})
	}
	// --replace puts over the existing one.
	out := must(t, s, "service", "create", "web", "--replace", "--vip", "198.51.100.20", "--mode", "encap", "--listener", "tcp:80=web", "--backend", "web=az1-h1/g1@4")
	if !strings.Contains(out, "service web updated") {
		t.Errorf("replace: %q", out)
	}
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServicePlanProblems: lookup and status use the edges' plan, so a
// backend the edges leave out (its host does not exist) is never chosen
// and the status says why.
func TestServicePlanProblems(t *testing.T) {
	v := &model.Service{Name: "web", VIP: netip.MustParseAddr("198.51.100.20"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}, {Host: "gone", Guest: "g1"}}}}}
	hosts := []model.Host{{Name: "az1-h1", Underlay: netip.MustParseAddr("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: netip.MustParseAddr("198.19.11.1"), VSID: 1}}}}
	plan := planOf(nil, hosts, v, nil, 7)
	for sport := uint16(1); sport < 50; sport++ {
		tuple := flowhash.Tuple{Src: netip.MustParseAddr("203.0.113.10"), Dst: v.VIP, SrcPort: sport, DstPort: 80, Proto: 6}
		res, err := lookup(plan, v, tuple, "tcp")
		if err != nil || res.Backend != "az1-h1/g1" {
			t.Fatalf("lookup: %+v %v", res, err)
		}
	}
	var out strings.Builder
	printServiceStatus(&out, &client.ServiceStatus{Service: v, Pools: []api.PoolStatus{{Name: "web"}}}, plan, time.Now())
	if !strings.Contains(out.String(), `backend gone/g1: host "gone" does not exist`) {
		t.Errorf("status does not say why a backend is left out:\n%s", out.String())
	}
}
