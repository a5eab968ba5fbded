package agent

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

func TestParseLocalAllow(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, c := range []struct {
		in   string
		want LocalAllow
	}{
		{"169.254.169.254/32:tcp:80", LocalAllow{pfx("169.254.169.254/32"), dataplane.LocalRule{Proto: 6, Lo: 80, Hi: 80}}},
		{"10.1.2.3/24:udp:5000-5010", LocalAllow{pfx("10.1.2.0/24"), dataplane.LocalRule{Proto: 17, Lo: 5000, Hi: 5010}}},
		{"10.1.2.3/32:icmp", LocalAllow{pfx("10.1.2.3/32"), dataplane.LocalRule{Proto: 1}}},
		{"10.1.2.3/32:47", LocalAllow{pfx("10.1.2.3/32"), dataplane.LocalRule{Proto: 47}}},
		{"10.1.2.3/32:any", LocalAllow{pfx("10.1.2.3/32"), dataplane.LocalRule{Hi: 65535}}},
		{"10.1.2.3/32", LocalAllow{pfx("10.1.2.3/32"), dataplane.LocalRule{Hi: 65535}}},
	} {
		got, err := ParseLocalAllow(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
		if again, err := ParseLocalAllow(got.String()); err != nil || again != got {
			t.Errorf("%q: String %q reads back as %+v %v", c.in, got.String(), again, err)
		}
	}
	for in, msg := range map[string]string{
		"nonsense":                "prefix",
		"2001:db8::/64":           "IPv4",
		"0.0.0.0/0":               "shorter than /8",
		"127.0.0.0/8":             "loopback",
		"10.0.0.0/8:tcp":          "needs a port",
		"10.0.0.0/8:tcp:0":        "1-65535",
		"10.0.0.0/8:udp:9-3":      "LO <= HI",
		"10.0.0.0/8:tcp:70000":    "1-65535",
		"10.0.0.0/8:icmp:8":       "no ports",
		"10.0.0.0/8:any:80":       "no port",
		"10.0.0.0/8:6":            "write tcp or udp",
		"10.0.0.0/8:sctpx":        "protocol",
		"10.0.0.0/8:tcp:80:extra": "PREFIX[:PROTO",
		"10.0.0.0/8:0":            "protocol",
	} {
		if _, err := ParseLocalAllow(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want one saying %q", in, err, msg)
		}
	}
}

// TestPlanLocal: a longer prefix holds the rules of the shorter ones
// covering it (the data plane reads the longest match only), each once.
func TestPlanLocal(t *testing.T) {
	var allow []LocalAllow
	for _, s := range []string{"169.254.0.0/16:icmp", "169.254.169.254/32:tcp:80", "169.254.169.254/32:icmp", "10.0.0.0/8:udp:53"} {
		a, err := ParseLocalAllow(s)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, a)
	}
	got, err := PlanLocal(allow)
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix][]dataplane.LocalRule{
		netip.MustParsePrefix("169.254.0.0/16"):     {{Proto: 1}},
		netip.MustParsePrefix("169.254.169.254/32"): {{Proto: 1}, {Proto: 6, Lo: 80, Hi: 80}},
		netip.MustParsePrefix("10.0.0.0/8"):         {{Proto: 17, Lo: 53, Hi: 53}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	// More rules than a prefix holds, with those it inherits.
	var many []LocalAllow
	for p := 1; p <= dataplane.MaxLocalRules; p++ {
		many = append(many, LocalAllow{netip.MustParsePrefix("10.0.0.0/8"), dataplane.LocalRule{Proto: 6, Lo: uint16(p), Hi: uint16(p)}})
	}
	if _, err := PlanLocal(many); err != nil {
		t.Fatalf("%d rules: %v", len(many), err)
	}
	many = append(many, LocalAllow{netip.MustParsePrefix("10.1.0.0/16"), dataplane.LocalRule{Proto: 1}})
	if _, err := PlanLocal(many); err == nil || !strings.Contains(err.Error(), "10.1.0.0/16 has 9 rules") {
		t.Errorf("9 rules for 10.1.0.0/16: %v", err)
	}
}

// TestCheckLocalAllow: a local prefix may not hand the host's kernel a
// packet for a guest of the host (of any VSID), the host's underlay
// address or an edge's.
func TestCheckLocalAllow(t *testing.T) {
	want := HostWant{
		Underlay: netip.MustParseAddr("198.18.11.1"),
		Edges:    []netip.Addr{netip.MustParseAddr("198.18.0.1")},
		Guests:   []model.Guest{{Name: "g2", Address: netip.MustParseAddr("198.19.11.3"), VSID: 5112}},
	}
	for s, msg := range map[string]string{
		"198.18.0.0/15:tcp:22":      "guest g2 (198.19.11.3, VSID 5112)",
		"198.19.11.2/31":            "guest g2",
		"198.18.11.0/24:udp:53":     "host's underlay address 198.18.11.1",
		"198.18.0.0/24:tcp:7946":    "edge underlay address 198.18.0.1",
		"169.254.169.254/32:tcp:80": "",
		"198.18.12.0/24:tcp:80":     "",
	} {
		a, err := ParseLocalAllow(s)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckLocalAllow([]LocalAllow{a}, want)
		switch {
		case msg == "" && err != nil:
			t.Errorf("%s refused: %v", s, err)
		case msg != "" && (err == nil || !strings.Contains(err.Error(), msg)):
			t.Errorf("%s: error %v, want one saying %q", s, err, msg)
		}
	}
}

// TestReconcilerLocalAllow: the reconciler writes the checked rules, and
// a configuration a new guest makes unsafe empties agent_local (guests
// reach nothing of the host) and is reported.
func TestReconcilerLocalAllow(t *testing.T) {
	fake := dataplane.NewFakeAgent()
	a, err := ParseLocalAllow("198.19.11.0/24:tcp:80")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReconciler(Config{NoRetry: true, Name: "h1", Underlay: "ul0", LocalAllow: []LocalAllow{a}, Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	w := HostWant{Underlay: netip.MustParseAddr("198.18.11.1")}
	r.mu.Lock()
	r.reconcile(w)
	r.mu.Unlock()
	if got := fake.Local[a.Prefix]; len(got) != 1 || len(r.errs) != 0 {
		t.Fatalf("agent_local %v, errors %v", fake.Local, r.errs)
	}
	w.Guests = []model.Guest{{Name: "g9", Address: netip.MustParseAddr("198.19.11.9"), VSID: 7}}
	r.mu.Lock()
	r.errs = nil
	r.reconcile(w)
	r.mu.Unlock()
	if len(fake.Local) != 0 || len(r.errs) != 1 || !strings.Contains(r.errs[0], "guest g9") {
		t.Fatalf("agent_local %v, errors %v: want empty and the guest named", fake.Local, r.errs)
	}
}
