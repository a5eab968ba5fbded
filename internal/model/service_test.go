package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func w(n uint32) *uint32 { return &n }

// webService is a valid encap service on region's hosts: tcp:80 to
// "web" (one backend with a fixed port), udp any port to "dns", a tcp
// range to "bulk" (no fixed ports: see validateFixedPorts).
// toNAT turns a service into nat mode, each backend an address of its own.
func toNAT(s *Service) {
	s.Mode = ModeNAT
	n := 0
	for i := range s.Pools {
		for j := range s.Pools[i].Backends {
			b := &s.Pools[i].Backends[j]
			n++
			b.Address, b.Host, b.Guest = netip.AddrFrom4([4]byte{198, 19, 201, byte(n)}), "", ""
		}
	}
}

func webService() *Service {
	return &Service{
		Name: "web", VIP: addr("198.51.100.20"), Mode: ModeEncap,
		Listeners: []Listener{
			{Protocol: "tcp", Port: 80, Pool: "web"},
			{Protocol: "tcp", Port: 8000, PortEnd: 8100, Pool: "bulk"},
			{Protocol: "udp", Pool: "dns"},
		},
		Pools: []Pool{
			{Name: "web", Backends: []Backend{{Host: "h1", Guest: "g1", Port: 8080}, {Host: "h2", Guest: "g1", Weight: w(3)}},
				Health: &HealthCheck{Type: "http", Path: "/healthz"}},
			{Name: "dns", Backends: []Backend{{Host: "h1", Guest: "g2"}}},
			{Name: "bulk", Backends: []Backend{{Host: "h1", Guest: "g2"}}},
		},
	}
}

func natService() *Service {
	return &Service{
		Name: "dmz", VIP: addr("198.51.100.30"), Mode: ModeNAT,
		Listeners: []Listener{{Protocol: "tcp", Port: 443, Pool: "tls"}},
		Pools:     []Pool{{Name: "tls", Backends: []Backend{{Address: addr("198.19.11.1"), Port: 8443}, {Address: addr("198.19.11.2"), Port: 8443}}}},
	}
}

func TestValidateService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *Service)
		want   []string
	}{
		{"ok", func(s *Service) {}, nil},
		{"no name, bad vip, bad mode", func(s *Service) { s.Name, s.VIP, s.Mode = "", addr("224.0.0.1"), "dsr" },
			[]string{"name~required", "vip~not a unicast", "mode~want encap or nat"}},
		{"IPv6 vip", func(s *Service) { s.VIP = addr("2001:db8::1") }, nil},
		{"IPv6 nat vip, IPv6 backends", func(s *Service) { toNAT6(s); s.VIP = addr("2001:db8::1") }, nil},
		{"IPv6 nat vip, IPv4 backends", func(s *Service) { toNAT(s); s.VIP = addr("2001:db8::1") }, []string{
			"pools[0].backends[0].address~198.19.201.1 is IPv4", "pools[0].backends[1].address~198.19.201.2 is IPv4",
			"pools[1].backends[0].address~198.19.201.3 is IPv4", "pools[2].backends[0].address~198.19.201.4 is IPv4"}},
		{"no mode", func(s *Service) { s.Mode = "" }, []string{"mode~required"}},
		{"long description", func(s *Service) { s.Description = strings.Repeat("x", 1025) }, []string{"description"}},
		// Table size.
		{"table size not prime", func(s *Service) { s.TableSize = 1000 }, []string{"tableSize~1000 is not a prime (try 1009)"}},
		{"table size too small", func(s *Service) { s.TableSize = 101 }, []string{`tableSize~101 is less than 100 x the 2 backends of pool "web" (try 211)`}},
		{"table size just enough", func(s *Service) { s.TableSize = 211 }, nil},
		{"table size too large", func(s *Service) { s.TableSize = 4194319 }, []string{"tableSize~above the maximum 4194301"}},
		// Listeners.
		{"no listeners", func(s *Service) { s.Listeners = nil }, []string{"listeners~at least one"}},
		{"bad protocol", func(s *Service) { s.Listeners[0].Protocol = "sctp" }, []string{`listeners[0].protocol~"sctp": want tcp or udp`}},
		{"no protocol", func(s *Service) { s.Listeners[0].Protocol = "" }, []string{"listeners[0].protocol~required"}},
		{"range from 0", func(s *Service) { s.Listeners[1].Port = 0 }, []string{"listeners[1].port~a range needs its first port"}},
		{"backwards range", func(s *Service) { s.Listeners[1].PortEnd = 7000 }, []string{"listeners[1].portEnd~7000 is below port 8000"}},
		{"range of one port", func(s *Service) { s.Listeners[1].PortEnd = 8000 }, nil},
		{"no pool", func(s *Service) { s.Listeners[0].Pool = "" }, []string{"listeners[0].pool~required"}},
		{"missing pool", func(s *Service) { s.Listeners[0].Pool = "api" }, []string{`listeners[0].pool~pool "api" is not one`}},
		{"same port twice", func(s *Service) { s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: 80, Pool: "dns"}) },
			[]string{"listeners[3]~tcp:80 overlaps listeners[0] (tcp:80)"}},
		{"port inside a range", func(s *Service) {
			s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: 8050, Pool: "dns"})
		},
			[]string{"listeners[3]~tcp:8050 overlaps listeners[1] (tcp:8000-8100)"}},
		{"range over a port", func(s *Service) {
			s.Listeners = append([]Listener{{Protocol: "tcp", Port: 1, PortEnd: 100, Pool: "dns"}}, s.Listeners...)
		}, []string{"listeners[1]~tcp:80 overlaps listeners[0] (tcp:1-100)"}},
		{"overlapping ranges", func(s *Service) {
			s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: 8100, PortEnd: 8200, Pool: "dns"})
		},
			[]string{"listeners[3]~tcp:8100-8200 overlaps listeners[1]"}},
		{"range ending where a port is", func(s *Service) {
			s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: 70, PortEnd: 80, Pool: "dns"})
		},
			[]string{"listeners[3]~overlaps listeners[0]"}},
		{"overlap after a long range", func(s *Service) {
			s.Listeners = []Listener{{Protocol: "tcp", Port: 1, PortEnd: 1000, Pool: "bulk"}, {Protocol: "tcp", Port: 500, Pool: "bulk"}, {Protocol: "tcp", Port: 900, Pool: "bulk"}}
		}, []string{"listeners[1]~overlaps listeners[0]", "listeners[2]~overlaps listeners[0]"}},
		{"adjacent ranges", func(s *Service) {
			s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: 8101, PortEnd: 8200, Pool: "dns"})
		}, nil},
		{"same port, other protocol", func(s *Service) { s.Listeners = append(s.Listeners, Listener{Protocol: "udp", Port: 80, Pool: "dns"}) }, nil},
		{"any port with specific ones", func(s *Service) { s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Pool: "dns"}) }, nil},
		{"two any-port listeners", func(s *Service) { s.Listeners = append(s.Listeners, Listener{Protocol: "udp", Pool: "bulk"}) },
			[]string{"listeners[3]~udp:any overlaps listeners[2] (udp:any)"}},
		{"every port", func(s *Service) {
			s.Listeners = []Listener{{Protocol: "tcp", Port: 1, PortEnd: 65535, Pool: "bulk"}, {Protocol: "tcp", Pool: "bulk"}}
		}, nil},
		{"every port of both protocols", func(s *Service) {
			s.Listeners = []Listener{{Protocol: "tcp", Port: 1, PortEnd: 65535, Pool: "bulk"}, {Protocol: "udp", Port: 1, PortEnd: 65535, Pool: "bulk"}}
		}, nil},
		{"64 ranges per protocol", func(s *Service) {
			s.Listeners = nil
			for i := range MaxRanges {
				s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: uint16(1000 + 10*i), PortEnd: uint16(1005 + 10*i), Pool: "bulk"},
					Listener{Protocol: "udp", Port: uint16(1000 + 10*i), PortEnd: uint16(1005 + 10*i), Pool: "bulk"})
			}
		}, nil},
		{"too many ranges", func(s *Service) {
			s.Listeners = nil
			for i := range MaxRanges + 1 {
				s.Listeners = append(s.Listeners, Listener{Protocol: "udp", Port: uint16(1000 + 10*i), PortEnd: uint16(1005 + 10*i), Pool: "bulk"})
			}
		}, []string{"listeners~65 udp port ranges: a service may have at most 64 per protocol"}},
		{"too many listeners", func(s *Service) {
			s.Listeners = nil
			for p := 1; p <= MaxListeners+1; p++ {
				s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Port: uint16(p), Pool: "bulk"})
			}
		}, []string{"listeners~1025 listeners"}},
		// Pools and backends.
		{"no pools", func(s *Service) { s.Pools, s.Listeners = nil, nil }, []string{"pools~at least one", "listeners~at least one"}},
		{"pool twice", func(s *Service) { s.Pools[1].Name = "web" }, []string{`pools[1].name~pool "web" appears twice (also pools[0])`, "listeners[2].pool"}},
		{"bad pool name", func(s *Service) { s.Pools[1].Name = "DNS"; s.Listeners[2].Pool = "DNS" }, []string{"pools[1].name~not a valid name"}},
		{"empty pool", func(s *Service) { s.Pools[1].Backends = nil }, []string{"pools[1].backends~at least one backend"}},
		{"backend twice", func(s *Service) {
			s.Pools[0].Backends = append(s.Pools[0].Backends, Backend{Host: "h1", Guest: "g1", Port: 8080, Weight: w(2)})
		},
			[]string{"pools[0].backends[2]~backend h1/g1:8080 appears twice (also backends[0])"}},
		{"same guest, other port", func(s *Service) { s.Pools[0].Backends = append(s.Pools[0].Backends, Backend{Host: "h1", Guest: "g1"}) },
			[]string{"pools[0].backends[2].port~guest h1/g1 is already backends[0] of this pool, on another port"}},
		{"encap backend with an address", func(s *Service) { s.Pools[0].Backends[0].Address = addr("198.19.1.1") },
			[]string{"pools[0].backends[0].address~an encap backend is a guest"}},
		{"encap backend without a guest", func(s *Service) { s.Pools[0].Backends[0].Guest = "" }, []string{"pools[0].backends[0].guest~required"}},
		{"weight too large", func(s *Service) { s.Pools[0].Backends[0].Weight = w(MaxWeight + 1) }, []string{"pools[0].backends[0].weight~above the maximum 1000000"}},
		{"weight 0 (drained)", func(s *Service) { s.Pools[0].Backends[0].Weight = w(0) }, nil},
		{"too many backends", func(s *Service) {
			s.Pools[0].Backends = nil
			for i := range MaxPoolBackends + 1 {
				s.Pools[0].Backends = append(s.Pools[0].Backends, Backend{Host: fmt.Sprintf("x%d", i), Guest: "g1", Port: 8080})
			}
		}, []string{"pools[0].backends~41944 backends: a pool may have at most 41943"}},
		// Health checks.
		{"bad check type", func(s *Service) { s.Pools[0].Health = &HealthCheck{Type: "icmp"} }, []string{`pools[0].health.type~"icmp": want tcp`}},
		{"no check type", func(s *Service) { s.Pools[0].Health = &HealthCheck{} }, []string{"pools[0].health.type~required"}},
		{"relative path", func(s *Service) { s.Pools[0].Health.Path = "healthz" }, []string{"pools[0].health.path~must start with /"}},
		{"path with a space", func(s *Service) { s.Pools[0].Health.Path = "/a b" }, []string{"pools[0].health.path~spaces"}},
		{"bad status", func(s *Service) { s.Pools[0].Health.Status = 600 }, []string{"pools[0].health.status~600 is not an HTTP status"}},
		{"path on a tcp check", func(s *Service) { s.Pools[0].Health = &HealthCheck{Type: "tcp", Path: "/"} }, []string{"pools[0].health.path~only http"}},
		{"status on a udp check", func(s *Service) { s.Pools[0].Health = &HealthCheck{Type: "udp", Status: 200} }, []string{"pools[0].health.status~only http"}},
		{"send on a tcp check", func(s *Service) { s.Pools[0].Health = &HealthCheck{Type: "tcp", Send: "x"} }, []string{"pools[0].health.send~only udp"}},
		{"udp check", func(s *Service) { s.Pools[0].Health = &HealthCheck{Type: "udp", Send: "ping"} }, nil},
		{"command without a command", func(s *Service) { toNAT(s); s.Pools[0].Health = &HealthCheck{Type: "command"} }, []string{"pools[0].health.command~required"}},
		{"command", func(s *Service) {
			toNAT(s)
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: "check-fast"}
		}, nil},
		{"command on an encap pool", func(s *Service) {
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: "check-fast"}
		}, []string{"pools[0].health.type~a command check runs on the edge, which reaches an encap backend only through its tunnel"}},
		{"command that is a path", func(s *Service) {
			toNAT(s)
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: "/bin/true"}
		}, []string{`pools[0].health.command~"/bin/true" is not a command name`}},
		{"command name too long", func(s *Service) {
			toNAT(s)
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: CommandName(strings.Repeat("a", 33))}
		}, []string{"pools[0].health.command~is not a command name"}},
		{"command every 500ms", func(s *Service) {
			toNAT(s)
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: "check-fast", Interval: Duration(500 * time.Millisecond)}
		}, []string{"pools[0].health.interval~500ms is shorter than the minimum 1s of a command check"}},
		{"command every second", func(s *Service) {
			toNAT(s)
			s.Pools[0].Health = &HealthCheck{Type: "command", Command: "check-fast", Interval: Duration(time.Second)}
		}, nil},
		{"command on an http check", func(s *Service) { s.Pools[0].Health.Command = "true" }, []string{"pools[0].health.command~only command"}},
		{"interval too short", func(s *Service) { s.Pools[0].Health.Interval = Duration(50 * time.Millisecond) },
			[]string{"pools[0].health.interval~50ms is shorter than the minimum 100ms"}},
		{"interval too long", func(s *Service) { s.Pools[0].Health.Interval = Duration(2 * time.Hour) }, []string{"pools[0].health.interval~longer"}},
		{"short interval, default timeout", func(s *Service) { s.Pools[0].Health.Interval = Duration(100 * time.Millisecond) }, nil},
		{"timeout not below interval", func(s *Service) { s.Pools[0].Health.Timeout = Duration(2 * time.Second) },
			[]string{"pools[0].health.timeout~2s is not shorter than the interval 2s"}},
		{"negative timeout", func(s *Service) { s.Pools[0].Health.Timeout = Duration(-time.Second) }, []string{"pools[0].health.timeout~must be positive"}},
		{"rise and fall", func(s *Service) { s.Pools[0].Health.Rise, s.Pools[0].Health.Fall = 11, -1 },
			[]string{"pools[0].health.rise~11 is outside 1-10", "pools[0].health.fall~-1 is outside 1-10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := webService()
			tc.change(s)
			checkErrors(t, s.Validate(), tc.want)
		})
	}
}

func TestValidateNATService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *Service)
		want   []string
	}{
		{"ok", func(s *Service) {}, nil},
		{"guest backend", func(s *Service) { s.Pools[0].Backends[0] = Backend{Host: "h1", Guest: "g1"} },
			[]string{"pools[0].backends[0].address~required", "pools[0].backends[0].host~a nat backend is an address"}},
		{"guest without host", func(s *Service) { s.Pools[0].Backends[0].Guest = "g1" }, []string{"pools[0].backends[0].guest~a nat backend"}},
		{"bad address", func(s *Service) { s.Pools[0].Backends[1].Address = addr("0.0.0.0") }, []string{"pools[0].backends[1].address~not a unicast"}},
		{"same address, other port", func(s *Service) {
			s.Pools[0].Backends[1].Address = addr("198.19.11.1")
			s.Pools[0].Backends[1].Port = 9443
		}, nil},
		{"same address and port", func(s *Service) { s.Pools[0].Backends[1].Address = addr("198.19.11.1") },
			[]string{"pools[0].backends[1]~backend 198.19.11.1:8443 appears twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natService()
			tc.change(s)
			checkErrors(t, s.Validate(), tc.want)
		})
	}
}

// lst and pool build services compactly in the reply tests: lst("tcp:80=a"),
// lst("tcp:8000-8100=a"), lst("udp:any=a"); nat backends "198.19.11.1:8443"
// or "198.19.11.1", encap backends "h1/g1:8080" or "h1/g1".
func lst(specs ...string) []Listener {
	var out []Listener
	for _, sp := range specs {
		proto, rest, _ := strings.Cut(sp, ":")
		ports, pool, _ := strings.Cut(rest, "=")
		l := Listener{Protocol: proto, Pool: pool}
		if ports != "any" {
			lo, hi, _ := strings.Cut(ports, "-")
			fmt.Sscan(lo, &l.Port)
			if hi != "" {
				fmt.Sscan(hi, &l.PortEnd)
			}
		}
		out = append(out, l)
	}
	return out
}

func pool(name string, backends ...string) Pool {
	p := Pool{Name: name}
	for _, s := range backends {
		var b Backend
		k, port, ok := strings.Cut(s, ":")
		if ok {
			fmt.Sscan(port, &b.Port)
		}
		if host, guest, encap := strings.Cut(k, "/"); encap {
			b.Host, b.Guest = host, guest
		} else {
			b.Address = addr(k)
		}
		p.Backends = append(p.Backends, b)
	}
	return p
}

func svc(name, vip, mode string, ls []Listener, pools ...Pool) *Service {
	return &Service{Name: name, VIP: addr(vip), Mode: mode, Listeners: ls, Pools: pools}
}

// TestValidateServiceReplies: the data planes translate replies by their
// connection (nat: the edge's lb_nat_conns) or flow (encap: the agent's
// agent_flows), so a backend port may answer for any number of VIP ports,
// and a fixed backend port may sit behind a listener of several ports. The
// model used to refuse all of these (issue 7, sections 2 and 3).
func TestValidateServiceReplies(t *testing.T) {
	const vip = "198.51.100.30"
	const x = "198.19.11.1"
	nat := func(ls []Listener, pools ...Pool) *Service { return svc("dmz", vip, ModeNAT, ls, pools...) }
	encap := func(ls []Listener, pools ...Pool) *Service { return svc("web", vip, ModeEncap, ls, pools...) }
	for _, tc := range []struct {
		name string
		s    *Service
		want []string
	}{
		// 1. Fixed ports and listeners of several ports.
		{"nat: fixed port behind a range", nat(lst("tcp:8000-8100=a"), pool("a", x+":8443")), nil},
		{"nat: fixed port behind any port", nat(lst("udp:any=a"), pool("a", x+":53")), nil},
		{"encap: fixed port behind a range", encap(lst("tcp:80=a", "tcp:8000-8100=a"), pool("a", "h1/g1", "h2/g1:8080")), nil},
		{"encap: fixed port behind any port", encap(lst("udp:any=a", "tcp:any=a"), pool("a", "h1/g1:53")), nil},
		{"nat: keep-port behind a range and any port", nat(lst("tcp:8000-8100=a", "tcp:any=a", "udp:any=a"), pool("a", x, "198.19.11.2")), nil},
		{"encap: keep-port behind a range and any port", encap(lst("tcp:8000-8100=a", "udp:any=a"), pool("a", "h1/g1", "h2/g1")), nil},
		{"fixed port behind a range of one port", nat(lst("tcp:443-443=a"), pool("a", x+":8443")), nil},
		{"fixed port behind a single port", nat(lst("tcp:443=a"), pool("a", x+":8443")), nil},

		// 2. nat: replies go by their connection, so a backend port may
		// answer for several VIP ports, and a fixed port may sit behind
		// a listener of several ports.
		{"nat: two listeners, one pool, one backend port", nat(lst("tcp:443=a", "tcp:444=a"), pool("a", x+":8443")), nil},
		{"nat: two pools, one backend port", nat(lst("tcp:443=a", "tcp:444=b"), pool("a", x+":8443"), pool("b", "198.19.11.2", x+":8443")), nil},
		{"nat: fixed port onto a keep-port listener's port", nat(lst("tcp:443=a", "tcp:8443=b"), pool("a", x+":8443"), pool("b", x)), nil},
		{"nat: fixed port inside a keep-port range", nat(lst("tcp:8000-8100=b", "tcp:80=a"), pool("a", x+":8050"), pool("b", x)), nil},
		{"nat: fixed port onto a port of the any-port listener", nat(lst("tcp:443=a", "tcp:any=b"), pool("a", x+":8443"), pool("b", x)), nil},
		{"nat: fixed port onto a port a specific listener takes from the any-port one",
			nat(lst("tcp:443=a", "tcp:8443=c", "tcp:any=b"), pool("a", x+":8443"), pool("b", x), pool("c", "198.19.11.2")), nil},
		{"nat: same address, other backend ports", nat(lst("tcp:443=a", "tcp:444=b"), pool("a", x+":8443"), pool("b", x+":8444")), nil},
		{"nat: same address and port, other protocol", nat(lst("tcp:53=a", "udp:54=a"), pool("a", x+":5353")), nil},
		{"nat: same backend, same VIP port, through two pools", nat(lst("tcp:80=a", "tcp:any=b"), pool("a", x+":80"), pool("b", x)), nil},
		{"nat: keep-port backend behind several listeners", nat(lst("tcp:80=a", "tcp:81=b", "tcp:8000-8100=a", "tcp:any=b"), pool("a", x), pool("b", x)), nil},
		{"nat: port 0 on a single port", nat(lst("tcp:80=a"), pool("a", x)), nil},
		{"nat: the same port, fixed and kept (one translation)", nat(lst("tcp:80=a"), pool("a", x+":80", x)), nil},

		// 3. encap: replies go by flow, a guest port may answer for several
		// VIP ports.
		{"encap: two listeners, one guest port", encap(lst("tcp:80=a", "tcp:81=b"), pool("a", "h1/g1:8080"), pool("b", "h2/g1", "h1/g1:8080")), nil},
		{"encap: fixed port onto the any-port listener", encap(lst("udp:53=a", "udp:any=b"), pool("a", "h1/g1:5353"), pool("b", "h1/g1")), nil},
		{"encap: same guest name on another host", encap(lst("tcp:80=a", "tcp:81=b"), pool("a", "h1/g1:8080"), pool("b", "h2/g1:8080")), nil},
		{"encap: other guests of a host", encap(lst("tcp:80=a", "tcp:81=b"), pool("a", "h1/g1:8080"), pool("b", "h1/g2:8080")), nil},
		{"encap: same guest, other ports", encap(lst("tcp:80=a", "tcp:81=b"), pool("a", "h1/g1:8080"), pool("b", "h1/g1:8081")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.s.Validate(), tc.want) })
	}
}

func TestServiceDefaults(t *testing.T) {
	s := webService()
	orig := webService()
	s.Listeners[1].PortEnd = 8000 // a range of one port
	c := s.Clone()
	c.Defaults()
	if !reflect.DeepEqual(s.Pools, orig.Pools) {
		t.Error("Defaults on a clone changed the original")
	}
	if c.TableSize != DefaultTableSize {
		t.Errorf("table size %d", c.TableSize)
	}
	if c.Listeners[1].PortEnd != 0 || c.Listeners[0] != orig.Listeners[0] {
		t.Errorf("listeners %+v", c.Listeners)
	}
	for _, p := range c.Pools {
		for _, b := range p.Backends {
			if b.Weight == nil {
				t.Errorf("backend %s without a weight", b.Key())
			}
		}
	}
	if *c.Pools[0].Backends[1].Weight != 3 || *c.Pools[0].Backends[0].Weight != 1 {
		t.Error("weights")
	}
	h := c.Pools[0].Health
	want := HealthCheck{Type: "http", Path: "/healthz", Status: 200, Interval: Duration(2 * time.Second), Timeout: Duration(time.Second), Rise: 2, Fall: 3}
	if !reflect.DeepEqual(*h, want) {
		t.Errorf("health %+v, want %+v", *h, want)
	}
	if c.Pools[1].Health != nil {
		t.Error("a pool without a check got one")
	}
	// Defaults twice is Defaults once; the stored form validates the same.
	again := c.Clone()
	again.Defaults()
	if !reflect.DeepEqual(c, again) {
		t.Error("Defaults is not idempotent")
	}
	if es := c.Validate(); es != nil {
		t.Error(es)
	}
	// A short interval gets a timeout of half of it.
	tcp := &HealthCheck{Type: "tcp", Interval: Duration(300 * time.Millisecond)}
	s2 := &Service{Pools: []Pool{{Health: tcp}}}
	s2.Defaults()
	if tcp.Timeout != Duration(150*time.Millisecond) || tcp.Path != "" || tcp.Status != 0 {
		t.Errorf("tcp check %+v", tcp)
	}
	// A large pool gets a table of at least 100 slots per backend.
	big := webService()
	for i := range 999 { // and its 2
		big.Pools[0].Backends = append(big.Pools[0].Backends, Backend{Host: fmt.Sprintf("x%d", i), Guest: "g1", Port: 8080})
	}
	big.Defaults()
	if big.TableSize != 100103 { // the first prime after 100 x 1001
		t.Errorf("table size of a 1001-backend pool: %d", big.TableSize)
	}
	if es := big.Validate(); es != nil {
		t.Error(es)
	}
}

func TestListenerFor(t *testing.T) {
	s := webService()
	s.Listeners = append(s.Listeners, Listener{Protocol: "tcp", Pool: "dns"})
	for _, tc := range []struct {
		proto string
		port  uint16
		want  string // listener, "" for none
	}{
		{"tcp", 80, "tcp:80"}, {"tcp", 8000, "tcp:8000-8100"}, {"tcp", 8100, "tcp:8000-8100"},
		{"tcp", 8101, "tcp:any"}, {"udp", 53, "udp:any"}, {"udp", 80, "udp:any"}, {"sctp", 80, ""},
	} {
		l, ok := s.ListenerFor(tc.proto, tc.port)
		if got := map[bool]string{true: l.String()}[ok]; got != tc.want {
			t.Errorf("%s:%d: %q, want %q", tc.proto, tc.port, got, tc.want)
		}
	}
	s.Listeners = s.Listeners[:2]
	if _, ok := s.ListenerFor("tcp", 81); ok {
		t.Error("tcp:81 without an any-port listener")
	}
}

func TestBackendKey(t *testing.T) {
	for _, tc := range []struct {
		b    Backend
		want string
	}{
		{Backend{Host: "az1-h1", Guest: "g1"}, "az1-h1/g1"},
		{Backend{Host: "az1-h1", Guest: "g1", Port: 8080}, "az1-h1/g1:8080"},
		{Backend{Address: addr("198.19.11.1")}, "198.19.11.1"},
		{Backend{Address: addr("198.19.11.1"), Port: 8443}, "198.19.11.1:8443"},
	} {
		if got := tc.b.Key(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
	// Encap backends have no address in JSON.
	b, _ := json.Marshal(Backend{Host: "h1", Guest: "g1", Weight: w(0)})
	if string(b) != `{"host":"h1","guest":"g1","weight":0}` {
		t.Errorf("JSON %s", b)
	}
}

// serviceRegion is region with web and dmz stored.
func serviceRegion(t *testing.T) *State {
	t.Helper()
	s := region(t)
	for _, v := range []*Service{webService(), natService()} {
		v.Defaults()
		if _, err := s.Put(v); err != nil {
			t.Fatalf("service %s: %v", v.Name, err)
		}
	}
	return s
}

func TestServiceReferences(t *testing.T) {
	withVIP := func(v *Service, a string) *Service { v.VIP = addr(a); return v }
	for _, tc := range []struct {
		name        string
		obj         Object
		field, text string // field "" and text "": allowed
	}{
		{"missing host", func() Object { v := webService(); v.Pools[0].Backends[0].Host = "h9"; return v }(),
			"pools[0].backends[0].host", `host "h9" does not exist`},
		{"missing guest", func() Object { v := webService(); v.Pools[1].Backends[0].Guest = "g7"; return v }(),
			"pools[1].backends[0].guest", `host "h1" has no guest "g7"`},
		{"nat backends need no hosts", withVIP(func() *Service {
			v := natService()
			v.Name = "dmz2"
			for i := range v.Pools[0].Backends {
				v.Pools[0].Backends[i].Port = 9443 // 8443 answers for dmz
			}
			return v
		}(), "198.51.100.31"), "", ""},
		{"VIP outside every set", withVIP(webService(), "192.0.2.20"), "vip", "192.0.2.20 is not inside a prefix of any edge set"},
		{"VIP that is an EIP", withVIP(webService(), "198.51.100.8"), "vip", "198.51.100.8 is an EIP"},
		{"VIP of another service", withVIP(webService(), "198.51.100.30"), "vip", "198.51.100.30 is already the VIP of service dmz"},
		{"second service, same VIP", func() Object { v := natService(); v.Name = "dmz2"; return v }(), "vip", "already the VIP of service dmz"},
		{"a service keeping its VIP", func() Object { v := webService(); v.Description = "x"; return v }(), "", ""},
		{"a service moving its VIP", withVIP(webService(), "198.51.100.21"), "", ""},
		{"EIP on a VIP", &EIP{Address: addr("198.51.100.20")}, "address", "198.51.100.20 is the VIP of service web"},
		{"removing a backend guest", &Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{{Name: "g1", Address: addr("198.19.1.1"), VSID: 5001}}},
			"guests", `guest "g2" is a backend of service web`},
		{"removing a guest bound and a backend", &Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1")},
			"guests", `guest "g1" is a backend of service web`},
		{"shrinking a set under a VIP", &EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/28")}, Edges: []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1")}}},
			"prefixes", "the VIP of 2 service(s) would no longer be covered by any edge set, the first dmz (198.51.100.30)"},
		{"health is the controller's", &Health{Service: "web"}, "", "written by the controller only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serviceRegion(t)
			before := serviceRegion(t)
			if v, ok := tc.obj.(*Service); ok {
				v.Defaults()
			}
			undo, err := s.Put(tc.obj)
			if tc.text == "" {
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
				return
			}
			wantErr(t, err, tc.field, tc.text)
			if !reflect.DeepEqual(s, before) {
				t.Error("a refused Put changed the state")
			}
		})
	}
}

func TestServiceDelete(t *testing.T) {
	for _, tc := range []struct {
		name, kind, key string
		text            string // "" when allowed
	}{
		{"host with backends", KindHost, "h2", "host h2 has guests that are backends of service web: remove them from the pools first"},
		{"host with EIPs and backends", KindHost, "h1", "host h1 has 1 bound EIP(s)"},
		{"the only set covering VIPs", KindEdgeSet, "pop-a", "edge set pop-a is the only one covering"},
		{"service", KindService, "web", ""},
		{"missing service", KindService, "api", `service "api" not found`},
		{"health", KindHealth, "web", "written by the controller only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serviceRegion(t)
			s.Set(&Health{Service: "web", Down: map[string][]string{"web": {"h2/g1"}}})
			before := serviceRegion(t)
			before.Set(&Health{Service: "web", Down: map[string][]string{"web": {"h2/g1"}}})
			undo, err := s.Delete(tc.kind, tc.key)
			if tc.text != "" {
				wantErr(t, err, "", tc.text)
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
		s := serviceRegion(t)
		if _, err := s.Delete(KindService, "web"); err != nil {
			t.Fatal(err)
		}
		if len(s.BackendOf("h2", "g1")) != 0 {
			t.Error("backend index kept a deleted service")
		}
		if _, err := s.Delete(KindHost, "h2"); err != nil {
			t.Errorf("deleting a host no service uses: %v", err)
		}
		if _, err := s.Put(&EIP{Address: addr("198.51.100.20")}); err != nil {
			t.Errorf("the VIP of a deleted service is still taken: %v", err)
		}
	})
	t.Run("two services on one guest", func(t *testing.T) {
		s := serviceRegion(t)
		v := webService()
		v.Name, v.VIP = "web2", addr("198.51.100.40")
		// Other backend ports than web's: a guest's port answers for
		// one VIP only.
		v.Listeners = []Listener{{Protocol: "tcp", Port: 81, Pool: "web"}}
		v.Pools = v.Pools[:1]
		v.Pools[0].Backends[0].Port = 8081
		v.Defaults()
		if _, err := s.Put(v); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(s.BackendOf("h2", "g1"), ","); got != "web,web2" {
			t.Errorf("backend of %s", got)
		}
		_, err := s.Delete(KindHost, "h2")
		wantErr(t, err, "", "backends of service web (and 1 more)")
		// Moving web's backends off h2 leaves web2's.
		w1 := webService()
		w1.Pools[0].Backends = w1.Pools[0].Backends[:1]
		w1.Defaults()
		if _, err := s.Put(w1); err != nil {
			t.Fatal(err)
		}
		_, err = s.Delete(KindHost, "h2")
		wantErr(t, err, "", "backends of service web2:")
	})
}

// TestServiceSetRemove: Set and Remove (no checks) keep the indexes right,
// and Clone does not share them.
func TestServiceSetRemove(t *testing.T) {
	s := serviceRegion(t)
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatal("clone differs")
	}
	w1 := webService()
	w1.Pools = w1.Pools[1:] // drops h2/g1
	w1.Listeners = w1.Listeners[2:]
	w1.Defaults()
	c.Set(w1)
	c.Set(&Health{Service: "web"})
	if len(c.BackendOf("h2", "g1")) != 0 || len(s.BackendOf("h2", "g1")) != 1 {
		t.Errorf("backend index: clone %v, original %v", c.BackendOf("h2", "g1"), s.BackendOf("h2", "g1"))
	}
	if _, ok := s.Health["web"]; ok {
		t.Error("health set on the clone reached the original")
	}
	c.Remove(KindService, "dmz")
	c.Remove(KindHealth, "web")
	if _, ok := c.ServiceOfVIP(addr("198.51.100.30")); ok {
		t.Error("VIP index kept a removed service")
	}
	if v, _ := s.ServiceOfVIP(addr("198.51.100.30")); v != "dmz" {
		t.Error("removing from the clone changed the original")
	}
	if c.Len(KindHealth) != 0 || c.Len(KindService) != 1 || strings.Join(s.Keys(KindService), ",") != "dmz,web" {
		t.Errorf("lens/keys: %d %d %v", c.Len(KindHealth), c.Len(KindService), s.Keys(KindService))
	}
}

func TestHealthObject(t *testing.T) {
	h := &Health{Service: "web", Down: map[string][]string{"web": {"h1/g1:8080"}}}
	if !h.IsDown("web", "h1/g1:8080") || h.IsDown("web", "h2/g1") || h.IsDown("dns", "h1/g1:8080") || h.DownCount() != 1 {
		t.Error("IsDown/DownCount")
	}
	var none *Health
	if none.IsDown("web", "x") || len(none.DownSet("web")) != 0 || none.DownCount() != 0 {
		t.Error("nil health")
	}
	checkErrors(t, (&Health{Service: "Web", Down: map[string][]string{"p": {""}}}).Validate(), []string{"service", "down.p[0]~empty"})
}

func TestHealthReportKey(t *testing.T) {
	for _, tc := range []struct{ edge, svc, pool, backend, key string }{
		{"edge-a1", "web", "web", "az1-h1/g1:8080", "/azgate/health/edge-a1/web/web/az1-h1%2Fg1:8080"},
		{"edge-a1", "dmz", "tls", "198.19.11.1:8443", "/azgate/health/edge-a1/dmz/tls/198.19.11.1:8443"},
		{"e", "s", "p", "h/g", "/azgate/health/e/s/p/h%2Fg"},
	} {
		k := HealthReportKey(tc.edge, tc.svc, tc.pool, tc.backend)
		if k != tc.key {
			t.Errorf("key %q, want %q", k, tc.key)
		}
		e, s, p, b, ok := ParseHealthReportKey(k)
		if !ok || e != tc.edge || s != tc.svc || p != tc.pool || b != tc.backend {
			t.Errorf("parse %q: %q %q %q %q %v", k, e, s, p, b, ok)
		}
		if !strings.HasPrefix(k, HealthReportEdgePrefix(tc.edge)) {
			t.Errorf("%q is not under its edge's prefix", k)
		}
	}
	for _, bad := range []string{"/azgate/health/e/s/p", "/azgate/health/e/s/p/h/g", "/azgate/health/e//p/b", "/azgate/status/e/s/p/b", "/azgate/health/e/s/p/%zz", "/azgate/health/e/s/p/"} {
		if _, _, _, _, ok := ParseHealthReportKey(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	r := HealthReport{Up: false, Since: time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC), Detail: "connect: connection refused"}
	b, _ := json.Marshal(r)
	if string(b) != `{"up":false,"since":"2026-12-02T15:04:05Z","detail":"connect: connection refused"}` {
		t.Errorf("report JSON %s", b)
	}
}

func TestDocumentServices(t *testing.T) {
	doc := `
azs: [{name: az1}]
hosts:
  - {name: h1, az: az1, underlay: 198.18.1.1, guests: [{name: g1, address: 198.19.1.1, vsid: 5001}]}
edgesets:
  - {name: pop-a, prefixes: [198.51.100.0/24]}
services:
  - name: web
    vip: 198.51.100.20
    mode: encap
    listeners:
      - {protocol: tcp, port: 80, pool: web}
      - {protocol: tcp, port: 8000, portEnd: 8100, pool: web}
      - {protocol: udp, pool: web}
    pools:
      - name: web
        backends: [{host: h1, guest: g1, weight: 2}]
        health: {type: http, path: /healthz, interval: 1s, timeout: 300ms}
`
	d, err := ParseDocument([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var places []string
	for _, p := range d.Placed() {
		places = append(places, p.Place)
	}
	if got := strings.Join(places, " "); got != "azs[0] hosts[0] edgesets[0] services[0]" {
		t.Errorf("placed %s", got)
	}
	v := d.Services[0]
	if v.Pools[0].Health.Timeout != Duration(300*time.Millisecond) || *v.Pools[0].Backends[0].Weight != 2 || v.Listeners[1].PortEnd != 8100 {
		t.Errorf("service %+v", v)
	}
	st := NewState()
	for _, o := range d.Objects() {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("%s: %v", o.Key(), err)
		}
	}

	for _, tc := range []struct{ name, doc, want string }{
		{"bad port", "services:\n  - name: web\n    pools:\n      - name: a\n      - name: b\n        backends: [{host: h1, guest: g1}, {host: h1, guest: g1}, {host: h1, guest: g2, port: 70000}]\n",
			"services[0].pools[1].backends[2].port: must not be the number 70000"},
		{"invalid service", "services:\n  - name: web\n    vip: 198.51.100.20\n    mode: nat\n    listeners: [{protocol: tcp, port: 80, pool: p}]\n    pools: [{name: p, backends: [{address: 198.19.1.1}, {address: 198.19.1.1}]}]\n",
			"services[0].pools[0].backends[1]: backend 198.19.1.1 appears twice"},
		{"duplicate service", "services:\n  - {name: a}\n  - {name: a}\n", "services[1]: service a also appears at services[0]"},
		{"bad duration", "services:\n  - name: web\n    pools: [{name: p, health: {type: tcp, interval: 2}}]\n", "services[0].pools[0].health.interval: a duration is a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDocument([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestServiceErrorsAreFieldErrors: Put's errors for services are field
// errors (the API maps them to 422 with fields).
func TestServiceErrorsAreFieldErrors(t *testing.T) {
	s := region(t)
	v := webService()
	v.VIP = addr("192.0.2.1")
	_, err := s.Put(v)
	var es Errors
	if !errors.As(err, &es) || fmt.Sprint(fields(es)) != "[vip]" {
		t.Errorf("error %v", err)
	}
}

// TestServicesSeed: the fuzz seed with services is a valid, consistent
// document (so the fuzzer starts from an accepted one).
func TestServicesSeed(t *testing.T) {
	b, err := os.ReadFile("testdata/documents/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	st := NewState()
	for _, p := range d.Placed() {
		if v, ok := p.Obj.(*Service); ok {
			v.Defaults()
		}
		if _, err := st.Put(p.Obj); err != nil {
			t.Fatalf("%s: %v", p.Place, err)
		}
	}
	if st.Len(KindService) != 2 {
		t.Errorf("%d services", st.Len(KindService))
	}
}

// TestCommandArgvRefused: a service written for the former API, whose
// command check carried an argv, is refused with an error naming the
// field and saying what to give instead (issue 7).
func TestCommandArgvRefused(t *testing.T) {
	old := `{"name":"web","vip":"203.0.113.10","mode":"nat","listeners":[{"protocol":"tcp","port":80,"pool":"p"}],
	"pools":[{"name":"p","backends":[{"address":"192.0.2.10"}],"health":{"type":"command","command":["/bin/sh","-c","id"]}}]}`
	_, err := Decode(KindService, []byte(old))
	var fe FieldError
	if !errors.As(err, &fe) || fe.Field != "pools[0].health.command" || !strings.Contains(fe.Msg, "--health-command") {
		t.Fatalf("got %v (%#v), want a field error on pools[0].health.command naming --health-command", err, err)
	}
	ok := strings.Replace(old, `["/bin/sh","-c","id"]`, `"check-web"`, 1)
	o, err := Decode(KindService, []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := o.(*Service).Pools[0].Health.Command; got != "check-web" {
		t.Errorf("command %q", got)
	}
	if _, err := ParseDocument([]byte("services:\n- name: web\n  vip: 203.0.113.10\n  mode: nat\n  listeners: [{protocol: tcp, port: 80, pool: p}]\n  pools:\n  - name: p\n    backends: [{address: 192.0.2.10}]\n    health: {type: command, command: [/bin/true]}\n")); err == nil || !strings.Contains(err.Error(), "services[0].pools[0].health.command") {
		t.Errorf("YAML document with an argv: %v", err)
	}
}
