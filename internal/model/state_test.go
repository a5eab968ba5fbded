package model

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// region is a small consistent state: two AZs, two hosts with guests, an
// edge set for 198.51.100.0/24 and one bound EIP.
func region(t *testing.T) *State {
	t.Helper()
	s := NewState()
	for _, o := range []Object{
		&AZ{Name: "az1"},
		&AZ{Name: "az2"},
		&Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.1.1"), VSID: 5001}, {Name: "g2", Address: addr("198.19.1.2"), VSID: 5001}}},
		&Host{Name: "h2", AZ: "az2", Underlay: addr("198.18.2.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.2.1"), VSID: 5002}}},
		&EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1")}}},
		&EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h1", Guest: "g1"}},
		&EIP{Address: addr("198.51.100.8")},
	} {
		if _, err := s.Put(o); err != nil {
			t.Fatalf("%s %s: %v", KindOf(o), o.Key(), err)
		}
	}
	return s
}

// wantErr checks err names field (for Errors) and says text.
func wantErr(t *testing.T, err error, field, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s: %s", field, text)
	}
	var es Errors
	if field != "" {
		if !errors.As(err, &es) {
			t.Fatalf("error %v (%T) is not a field error list", err, err)
		}
		if es[0].Field != field {
			t.Errorf("error %v names %q, want %q", err, es[0].Field, field)
		}
	}
	if !strings.Contains(err.Error(), text) {
		t.Errorf("error %q does not say %q", err, text)
	}
}

func TestPutReferences(t *testing.T) {
	for _, tc := range []struct {
		name        string
		obj         Object
		field, text string
	}{
		{"host in a missing AZ", &Host{Name: "h3", AZ: "az9", Underlay: addr("198.18.3.1")}, "az", `AZ "az9" does not exist`},
		{"host on another host's underlay", &Host{Name: "h3", AZ: "az1", Underlay: addr("198.18.1.1")}, "underlay", "underlay address of host h1"},
		{"host on an edge's underlay", &Host{Name: "h3", AZ: "az1", Underlay: addr("198.18.0.1")}, "underlay", "edge pop-a/edge-a1"},
		{"edge on a host's underlay", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.18.2.1")}}},
			"edges[0].underlay", "host h2"},
		{"edge in two sets", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.9")}}},
			"edges[0].name", `already belongs to set "pop-a"`},
		{"prefix of another set", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}}, "prefixes[0]", `announced by set "pop-a"`},
		{"a /32 set inside another set's /24", &EdgeSet{Name: "hot", Prefixes: []netip.Prefix{prefix("198.51.100.7/32")}}, "prefixes[0]", `overlaps 198.51.100.0/24 announced by set "pop-a"`},
		{"a prefix covering another set's", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.51.0.0/16")}}, "prefixes[0]", `overlaps 198.51.100.0/24 announced by set "pop-a"`},
		{"a prefix containing a host's underlay", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.18.2.0/24")}}, "prefixes[0]", "contains 198.18.2.1, the underlay address of host h2"},
		{"a prefix containing an edge's underlay", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.18.0.0/24")}}, "prefixes[0]", "contains 198.18.0.1, the underlay address of edge pop-a/edge-a1"},
		{"a prefix containing its own edge's underlay", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("192.0.2.1")}}}, "prefixes[0]", "contains 192.0.2.1, the underlay address of edge pop-b/edge-b1"},
		{"a prefix containing a BGP next hop", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, BGP: &SetBGP{ASN: 64512}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.18.0.9"), BGP: &NodeBGP{RouterID: addr("198.18.0.9"), NextHop: addr("192.0.2.254"), Peers: []BGPPeer{{Address: addr("198.18.0.254"), ASN: 64513}}}}}}, "prefixes[0]", "contains 192.0.2.254, the BGP next hop of edge pop-b/edge-b1"},
		{"a prefix containing a router ID", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, BGP: &SetBGP{ASN: 64512}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.18.0.9"), BGP: &NodeBGP{RouterID: addr("192.0.2.253"), NextHop: addr("198.18.0.9"), Peers: []BGPPeer{{Address: addr("198.18.0.254"), ASN: 64513}}}}}}, "prefixes[0]", "contains 192.0.2.253, the BGP router ID of edge pop-b/edge-b1"},
		{"an edge underlay in another set's prefix", &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.51.100.200")}}}, "edges[0].underlay", `lies in 198.51.100.0/24 announced by set "pop-a"`},
		{"a host underlay in a set's prefix", &Host{Name: "h3", AZ: "az1", Underlay: addr("198.51.100.200")}, "underlay", `lies in 198.51.100.0/24 announced by set "pop-a"`},
		{"EIP outside every set", &EIP{Address: addr("192.0.2.1")}, "address", "not inside a prefix"},
		{"EIP on a missing host", &EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h9", Guest: "g1"}}, "binding.host", `host "h9" does not exist`},
		{"EIP on a missing guest", &EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h2", Guest: "g9"}}, "binding.guest", `host "h2" has no guest "g9"`},
		{"guest already bound", &EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h1", Guest: "g1"}}, "binding.guest", "already bound to EIP 198.51.100.7"},
		{"removing a bound guest", &Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1")}, "guests", `guest "g1" is bound to EIP 198.51.100.7`},
		{"shrinking a set under an EIP", &EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}}, "prefixes", "would no longer be covered by any edge set, the lowest 198.51.100.7"},
		{"invalid on its own", &AZ{Name: "AZ"}, "name", "not a valid name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := region(t)
			before := region(t)
			_, err := s.Put(tc.obj)
			wantErr(t, err, tc.field, tc.text)
			if !reflect.DeepEqual(s, before) {
				t.Error("a refused Put changed the state")
			}
		})
	}
}

func TestPutAllowed(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  Object
	}{
		{"rebinding the same EIP to its guest", &EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h1", Guest: "g1"}, Description: "x"}},
		{"moving an EIP to another AZ", &EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"}}},
		{"host keeping its underlay", &Host{Name: "h2", AZ: "az1", Underlay: addr("198.18.2.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.2.1"), VSID: 5002}}}},
		{"host moving its underlay", &Host{Name: "h2", AZ: "az2", Underlay: addr("198.18.2.9"), Guests: []Guest{{Name: "g1", Address: addr("198.19.2.1"), VSID: 5002}}}},
		{"removing an unbound guest", &Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.1.1"), VSID: 5001}}}},
		{"set growing", &EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24"), prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1")}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := region(t)
			before := region(t)
			undo, err := s.Put(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Get(KindOf(tc.obj), tc.obj.Key()); got != tc.obj {
				t.Error("Put did not store the object")
			}
			undo()
			if !reflect.DeepEqual(s, before) {
				t.Error("undo did not restore the state exactly")
			}
		})
	}
}

func TestDelete(t *testing.T) {
	for _, tc := range []struct {
		name, kind, key string
		text            string // "" when allowed
	}{
		{"AZ with hosts", KindAZ, "az1", "AZ az1 still has host h1"},
		{"host with bound EIPs", KindHost, "h1", "host h1 has 1 bound EIP(s), the lowest 198.51.100.7"},
		{"the only set covering EIPs", KindEdgeSet, "pop-a", "edge set pop-a is the only one covering 2 EIP(s), the lowest 198.51.100.7"},
		{"missing", KindHost, "h9", `host "h9" not found`},
		{"host without bound EIPs", KindHost, "h2", ""},
		{"bound EIP", KindEIP, "198.51.100.7", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := region(t)
			before := region(t)
			undo, err := s.Delete(tc.kind, tc.key)
			if tc.text != "" {
				wantErr(t, err, "", tc.text)
				var ce *ConflictError
				var nf *NotFoundError
				if !errors.As(err, &ce) && !errors.As(err, &nf) {
					t.Errorf("error %T, want a ConflictError or NotFoundError", err)
				}
				if !reflect.DeepEqual(s, before) {
					t.Error("a refused Delete changed the state")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := s.Get(tc.kind, tc.key); ok {
				t.Error("still there")
			}
			undo()
			if !reflect.DeepEqual(s, before) {
				t.Error("undo did not restore the state exactly")
			}
		})
	}

	t.Run("freed indexes", func(t *testing.T) {
		s := region(t)
		if _, err := s.Delete(KindEIP, "198.51.100.7"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(&EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h1", Guest: "g1"}}); err != nil {
			t.Errorf("the guest of a deleted EIP is still taken: %v", err)
		}
		if _, err := s.Delete(KindHost, "h2"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(&Host{Name: "h3", AZ: "az2", Underlay: addr("198.18.2.1")}); err != nil {
			t.Errorf("the underlay of a deleted host is still taken: %v", err)
		}
	})
}

// TestUndoBatch applies a batch and undoes it in reverse, as the
// controller does when a commit fails.
func TestUndoBatch(t *testing.T) {
	s := region(t)
	before := region(t)
	var undos []func()
	step := func(undo func(), err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		undos = append(undos, undo)
	}
	step(s.Put(&AZ{Name: "az3"}))
	step(s.Put(&Host{Name: "h3", AZ: "az3", Underlay: addr("198.18.3.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.3.1"), VSID: 5003}}}))
	step(s.Put(&EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h3", Guest: "g1"}}))
	step(s.Put(&EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h1", Guest: "g1"}}))
	step(s.Delete(KindEIP, "198.51.100.8"))
	step(s.Put(&EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "edge-a9", Underlay: addr("198.18.0.9")}}}))
	step(s.Delete(KindHost, "h2"))
	step(s.Put(&Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.0.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.1.1"), VSID: 5001}}}))
	for i := len(undos) - 1; i >= 0; i-- {
		undos[i]()
	}
	if !reflect.DeepEqual(s, before) {
		t.Errorf("state after undoing the batch:\n%+v\nwant\n%+v", s, before)
	}
}

func TestSetRemoveClone(t *testing.T) {
	s := region(t)
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatal("clone differs")
	}
	// Set and Remove (no checks) keep the indexes right.
	c.Set(&EIP{Address: addr("198.51.100.7")})
	c.Remove(KindHost, "h2")
	c.Set(&Host{Name: "h4", AZ: "az1", Underlay: addr("198.18.2.1")})
	if _, ok := c.BoundEIP("h1", "g1"); ok {
		t.Error("binding index not updated by Set")
	}
	if _, err := c.Put(&EIP{Address: addr("198.51.100.9"), Binding: &Binding{Host: "h1", Guest: "g1"}}); err != nil {
		t.Error(err)
	}
	if _, err := c.Put(&Host{Name: "h5", AZ: "az1", Underlay: addr("198.18.2.1")}); err == nil {
		t.Error("underlay index not updated by Set")
	}
	// The original is untouched.
	if !reflect.DeepEqual(s, region(t)) {
		t.Error("changing the clone changed the original")
	}
	if got := s.Keys(KindEIP); strings.Join(got, " ") != "198.51.100.7 198.51.100.8" || s.Len(KindEIP) != 2 {
		t.Errorf("keys %v", got)
	}
}

func TestKeysOrder(t *testing.T) {
	s := region(t)
	for _, a := range []string{"198.51.100.10", "198.51.100.9", "198.51.100.100"} {
		if _, err := s.Put(&EIP{Address: addr(a)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(s.Keys(KindEIP), " "); got != "198.51.100.7 198.51.100.8 198.51.100.9 198.51.100.10 198.51.100.100" {
		t.Errorf("EIPs in numeric order: %s", got)
	}
	if got := strings.Join(s.Keys(KindHost), " "); got != "h1 h2" {
		t.Errorf("hosts: %s", got)
	}
}

// TestServiceReplyConflicts: across services, one nat backend port answers
// for one VIP only; encap guests answer for any number (replies go by flow). serviceRegion has
// web (encap, 198.51.100.20: tcp:80 -> h1/g1:8080 and h2/g1, tcp:8000-8100
// -> h1/g2, udp:any -> h1/g2) and dmz (nat, 198.51.100.30: tcp:443 ->
// 198.19.11.1:8443 and 198.19.11.2:8443).
func TestServiceReplyConflicts(t *testing.T) {
	const vip = "198.51.100.31"
	nat := func(ls []Listener, pools ...Pool) *Service { return svc("other", vip, ModeNAT, ls, pools...) }
	encap := func(ls []Listener, pools ...Pool) *Service { return svc("other", vip, ModeEncap, ls, pools...) }
	for _, tc := range []struct {
		name        string
		pre         []*Service // stored first
		obj         *Service
		field, text string // "": allowed
	}{
		// nat: replies go by their connection (lb_nat_conns): a nat
		// backend's ports claim nothing, any number of services share them.
		{"nat: same backend and port", nil, nat(lst("tcp:443=p"), pool("p", "198.19.11.9", "198.19.11.1:8443")),
			"", ""},
		{"nat: same backend port for another VIP port", nil, nat(lst("tcp:80=p"), pool("p", "198.19.11.2:8443")),
			"", ""},
		{"nat: keep-port onto a backend port in use", nil, nat(lst("tcp:8443=p"), pool("p", "198.19.11.1")),
			"", ""},
		{"nat: keep-port range over a backend port in use", nil, nat(lst("tcp:8000-9000=p"), pool("p", "198.19.11.1")),
			"", ""},
		{"nat: any port onto an address in use", nil, nat(lst("tcp:any=p"), pool("p", "198.19.11.1")),
			"", ""},
		{"nat: an address another service takes any port of",
			[]*Service{svc("all", "198.51.100.32", ModeNAT, lst("tcp:any=p"), pool("p", "198.19.12.1"))},
			nat(lst("tcp:80=p"), pool("p", "198.19.12.1:8080")),
			"", ""},
		{"nat: two any-port listeners on an address",
			[]*Service{svc("all", "198.51.100.32", ModeNAT, lst("udp:any=p"), pool("p", "198.19.12.1"))},
			nat(lst("udp:any=p"), pool("p", "198.19.12.1")),
			"", ""},
		{"nat: same address, other port", nil, nat(lst("tcp:443=p"), pool("p", "198.19.11.1:9443")), "", ""},
		{"nat: same address and port, other protocol", nil, nat(lst("udp:443=p"), pool("p", "198.19.11.1:8443")), "", ""},
		{"nat: keep-port range beside a backend port in use", nil, nat(lst("tcp:9000-9100=p", "tcp:8000-8442=p"), pool("p", "198.19.11.1")), "", ""},
		{"nat: any port of another protocol", nil, nat(lst("udp:any=p"), pool("p", "198.19.11.1")), "", ""},
		{"nat: a guest's address is not a nat backend", nil, nat(lst("tcp:80=p"), pool("p", "198.19.1.1:8080")), "", ""},
		// encap: the agent translates each reply by its own flow, so a guest
		// port may answer for several services.
		{"encap: same guest and port", nil, encap(lst("tcp:80=p"), pool("p", "h1/g1:8080")), "", ""},
		{"encap: same guest, keep-port on the same port", nil, encap(lst("tcp:80=p"), pool("p", "h2/g1")), "", ""},
		{"encap: fixed port inside another service's range", nil, encap(lst("tcp:443=p"), pool("p", "h1/g2:8050")), "", ""},
		{"encap: a guest another service takes any port of", nil, encap(lst("udp:53=p"), pool("p", "h1/g2")), "", ""},
		{"encap: any port of a guest another service takes any port of", nil, encap(lst("udp:any=p"), pool("p", "h1/g2")), "", ""},
		{"encap: same guest, other port", nil, encap(lst("tcp:80=p"), pool("p", "h1/g1:8081", "h2/g1:8080")), "", ""},
		{"encap: same guest, keep-port on other ports", nil, encap(lst("tcp:81=p", "tcp:9000-9100=p"), pool("p", "h2/g1", "h1/g2")), "", ""},
		{"encap: same guest name on another host", nil, encap(lst("udp:any=p"), pool("p", "h2/g1")), "", ""},
		// Replacing a service: its own claims are no conflict.
		{"web again, with another description", nil, func() *Service { v := webService(); v.Description = "x"; return v }(), "", ""},
		{"dmz moving to other ports", nil, func() *Service { v := natService(); v.Listeners = lst("tcp:8443=tls", "tcp:444=tls"); return v }(), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serviceRegion(t)
			before := serviceRegion(t)
			for _, v := range tc.pre {
				for _, st := range []*State{s, before} {
					if _, err := st.Put(v.Clone()); err != nil {
						t.Fatalf("service %s: %v", v.Name, err)
					}
				}
			}
			tc.obj.Defaults()
			undo, err := s.Put(tc.obj)
			if tc.text == "" {
				if err != nil {
					t.Fatal(err)
				}
				undo()
				if !reflect.DeepEqual(s, before) {
					t.Error("undo did not restore the state exactly")
				}
				return
			}
			wantErr(t, err, tc.field, tc.text)
			if !reflect.DeepEqual(s, before) {
				t.Error("a refused Put changed the state")
			}
		})
	}
}
