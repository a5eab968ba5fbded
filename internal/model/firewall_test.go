package model

import (
	"net/netip"
	"strings"
	"testing"
)

func TestFirewallRuleValidate(t *testing.T) {
	ok := FirewallRule{Name: "ssh", Action: FirewallDeny, Sources: []netip.Prefix{prefix("203.0.113.0/24")}, Protocol: ProtoTCP, Port: 22}
	for _, tc := range []struct {
		name  string
		edit  func(*FirewallRule)
		field string
		text  string
	}{
		{"no name", func(f *FirewallRule) { f.Name = "" }, "name", "required"},
		{"no action", func(f *FirewallRule) { f.Action = "" }, "action", "required"},
		{"bad action", func(f *FirewallRule) { f.Action = "reject" }, "action", "want deny or allow"},
		{"no sources", func(f *FirewallRule) { f.Sources = nil }, "sources", "at least one"},
		{"host bits", func(f *FirewallRule) { f.Sources = []netip.Prefix{prefix("203.0.113.7/24")} }, "sources[0]", "host bits"},
		{"ipv6 host bits", func(f *FirewallRule) { f.Sources = []netip.Prefix{prefix("2001:db8::1/64")} }, "sources[0]", "host bits"},
		{"ipv4-mapped", func(f *FirewallRule) { f.Sources = []netip.Prefix{prefix("::ffff:203.0.113.0/120")} }, "sources[0]", "IPv4-mapped"},
		{"ipv6 duplicate", func(f *FirewallRule) { f.Sources = []netip.Prefix{prefix("2001:db8::/32"), prefix("2001:db8::/32")} }, "sources[1]", "appears twice"},
		{"duplicate", func(f *FirewallRule) { f.Sources = append(f.Sources, f.Sources[0]) }, "sources[1]", "appears twice"},
		{"too many", func(f *FirewallRule) {
			f.Sources = nil
			for i := range MaxFirewallSources + 1 {
				f.Sources = append(f.Sources, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32))
			}
		}, "sources", "at most"},
		{"both destinations", func(f *FirewallRule) { f.Set, f.Address = "pop-a", addr("198.51.100.7") }, "address", "not both"},
		{"bad address", func(f *FirewallRule) { f.Address = addr("224.0.0.1") }, "address", "not a unicast"},
		{"bad ipv6 address", func(f *FirewallRule) { f.Address = addr("fe80::1") }, "address", "not a global unicast"},
		{"mapped address", func(f *FirewallRule) { f.Address = addr("::ffff:198.51.100.7") }, "address", "IPv4-mapped"},
		{"bad protocol", func(f *FirewallRule) { f.Protocol = "sctp" }, "protocol", "want tcp, udp, icmp or any"},
		{"icmp ports", func(f *FirewallRule) { f.Protocol = ProtoICMP }, "port", "need protocol tcp or udp"},
		{"any ports", func(f *FirewallRule) { f.Protocol = "" }, "port", "need protocol tcp or udp"},
		{"range start", func(f *FirewallRule) { f.Port, f.PortEnd = 0, 80 }, "port", "first port"},
		{"range order", func(f *FirewallRule) { f.Port, f.PortEnd = 80, 79 }, "portEnd", "below port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			f.Sources = append([]netip.Prefix(nil), ok.Sources...)
			tc.edit(&f)
			wantErr(t, f.Validate().Err(), tc.field, tc.text)
		})
	}
	if es := ok.Validate(); len(es) > 0 {
		t.Fatalf("valid rule: %v", es)
	}
	// Both families in one rule, an IPv6 destination, ::/0.
	dual := ok
	dual.Sources = []netip.Prefix{prefix("203.0.113.0/24"), prefix("2001:db8:1::/48"), prefix("::/0")}
	dual.Address = addr("2001:db8:f::10")
	if es := dual.Validate(); len(es) > 0 {
		t.Fatalf("valid dual-stack rule: %v", es)
	}
	if lo, hi := (&FirewallRule{}).Ports(); lo != 0 || hi != 65535 {
		t.Errorf("no ports: %d-%d, want every port", lo, hi)
	}
	if lo, hi := (&FirewallRule{Port: 8000, PortEnd: 8100}).Ports(); lo != 8000 || hi != 8100 {
		t.Errorf("range: %d-%d", lo, hi)
	}
}

// TestFirewallRuleReferences: a rule's destination exists, and a
// destination a rule names is not deleted under it.
func TestFirewallRuleReferences(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	src := []netip.Prefix{prefix("203.0.113.0/24")}
	wantErr(t, put(&FirewallRule{Name: "a", Action: FirewallAllow, Sources: src, Set: "nope"}), "set", "does not exist")
	wantErr(t, put(&FirewallRule{Name: "a", Action: FirewallAllow, Sources: src, Address: addr("198.51.100.99")}), "address", "neither an EIP nor a VIP")
	for _, o := range []Object{
		&FirewallRule{Name: "eip", Action: FirewallAllow, Sources: src, Address: addr("198.51.100.8")},
		&FirewallRule{Name: "set", Action: FirewallDeny, Sources: src, Set: "pop-a"},
		&FirewallRule{Name: "all", Action: FirewallDeny, Sources: []netip.Prefix{prefix("0.0.0.0/0")}, Protocol: ProtoUDP, Port: 19},
	} {
		if err := put(o); err != nil {
			t.Fatalf("%s: %v", o.Key(), err)
		}
	}
	if _, err := s.Delete(KindEIP, "198.51.100.8"); err == nil || !strings.Contains(err.Error(), "firewall rule(s), the first eip") {
		t.Errorf("deleting an EIP a rule names: %v", err)
	}
	if _, err := s.Delete(KindEdgeSet, "pop-a"); err == nil || !strings.Contains(err.Error(), "the first set") {
		t.Errorf("deleting a set a rule names: %v", err)
	}
	vip := func(a string) *Service {
		return &Service{Name: "web", VIP: addr(a), Mode: ModeNAT, TableSize: 101,
			Listeners: []Listener{{Protocol: ProtoTCP, Port: 80, Pool: "p"}},
			Pools:     []Pool{{Name: "p", Backends: []Backend{{Address: addr("198.19.200.1")}}}}}
	}
	if err := put(vip("198.51.100.80")); err != nil {
		t.Fatal(err)
	}
	if err := put(&FirewallRule{Name: "vip", Action: FirewallAllow, Sources: src, Address: addr("198.51.100.80")}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(vip("198.51.100.81")), "vip", "the first vip: change them before the VIP")
	if _, err := s.Delete(KindService, "web"); err == nil || !strings.Contains(err.Error(), "firewall rule(s), the first vip") {
		t.Errorf("deleting a service whose VIP a rule names: %v", err)
	}
	if _, err := s.Delete(KindFirewallRule, "eip"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEIP, "198.51.100.8"); err != nil {
		t.Errorf("deleting the EIP once no rule names it: %v", err)
	}
}

// TestFirewallDocument: rules come in documents like every other kind, and
// an invalid one is refused whole with its place.
func TestFirewallDocument(t *testing.T) {
	d, err := ParseDocument([]byte(`
firewallrules:
- name: block
  action: deny
  sources: [203.0.113.0/24]
  protocol: tcp
  port: 8000
  portEnd: 8100
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.FirewallRules) != 1 || d.FirewallRules[0].Port != 8000 || !d.FirewallRules[0].Global() {
		t.Fatalf("parsed %+v", d.FirewallRules)
	}
	_, err = ParseDocument([]byte(`{"firewallrules":[{"name":"x","action":"deny","sources":["203.0.113.1/24"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "firewallrules[0].sources[0]") {
		t.Errorf("invalid rule in a document: %v", err)
	}
}
