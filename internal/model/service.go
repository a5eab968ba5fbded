package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/maglev"
)

// KindService is the kind of load-balanced services.
const KindService = "services"

// Forwarding modes of a service.
const (
	// ModeEncap tunnels to the backend's host in NVGRE, as for EIPs; the
	// host's agent translates VIP:port to the guest and back.
	ModeEncap = "encap"
	// ModeNAT translates VIP:port to the backend's address and port at the
	// edge (DNAT in, SNAT back): for plain servers that know nothing of
	// tunnels (the DMZ case).
	ModeNAT = "nat"
)

// DefaultTableSize is the default Maglev table size (a prime).
const DefaultTableSize = 65537

// Service is a VIP whose listeners send traffic to pools of backends that
// may sit in any AZ.
type Service struct {
	Name        string     `json:"name"`
	VIP         netip.Addr `json:"vip"`
	Mode        string     `json:"mode"` // encap or nat
	Description string     `json:"description,omitempty"`
	// TableSize is the Maglev table size M of each pool: a prime of at
	// least 100 x the pool's backends (0: DefaultTableSize).
	TableSize uint32     `json:"tableSize,omitempty"`
	Listeners []Listener `json:"listeners"`
	Pools     []Pool     `json:"pools"`
	// Set names the dedicated edge set the VIP is pulled out into ("":
	// served by the prefix set that covers it).
	Set string `json:"set,omitempty"`
	// Limits are the VIP's rate limits at the edges (nil: none).
	Limits *Limits `json:"limits,omitempty"`
}

// Listener sends a protocol and port (or range, or any port) of the VIP to
// a pool. Port 0 without PortEnd is any port; PortEnd > Port is a range.
type Listener struct {
	Protocol string `json:"protocol"` // tcp or udp
	Port     uint16 `json:"port,omitempty"`
	PortEnd  uint16 `json:"portEnd,omitempty"`
	Pool     string `json:"pool"`
}

// Pool is a set of backends with a health check.
type Pool struct {
	Name     string       `json:"name"`
	Backends []Backend    `json:"backends"`
	Health   *HealthCheck `json:"health,omitempty"`
}

// Backend is one server of a pool. In encap mode it is a guest on an AZ
// host; in nat mode a plain address. Port 0 means the listener's port.
type Backend struct {
	Host    string     `json:"host,omitempty"`
	Guest   string     `json:"guest,omitempty"`
	Address netip.Addr `json:"address,omitzero"`
	Port    uint16     `json:"port,omitempty"`
	// Weight: relative share of new flows; 0 drains the backend (it keeps
	// its established connections and gets no new ones). Omitted: 1.
	Weight *uint32 `json:"weight,omitempty"`
}

// W returns the backend's weight (1 when omitted).
func (b Backend) W() uint32 {
	if b.Weight == nil {
		return 1
	}
	return *b.Weight
}

// Key identifies a backend within its pool, stably: it orders the
// backends of a Maglev table (every node must agree) and names the
// backend in health results. encap: "host/guest[:port]"; nat:
// "address[:port]".
func (b Backend) Key() string {
	k := b.Address.String()
	if b.Host != "" {
		k = b.Host + "/" + b.Guest
	} else if b.Port != 0 && b.Address.Is6() {
		// An IPv6 nat backend's address in brackets before its port:
		// 2001:db8::1:8080 would name another address.
		k = "[" + k + "]"
	}
	if b.Port != 0 {
		k += fmt.Sprintf(":%d", b.Port)
	}
	return k
}

// HealthCheck says how edges probe a pool's backends.
type HealthCheck struct {
	Type   string `json:"type"`           // tcp, http, https, udp, command
	Port   uint16 `json:"port,omitempty"` // 0: the backend's port
	Path   string `json:"path,omitempty"` // http(s): GET path (default /)
	Status int    `json:"status,omitempty"`
	Send   string `json:"send,omitempty"` // udp: payload (a reply means up)
	// Command names a command of the edges' own configuration
	// (--health-command NAME=/path args, see CommandName); exit 0 means
	// up. The API never carries a program or its arguments.
	Command  CommandName `json:"command,omitempty"`
	Interval Duration    `json:"interval,omitempty"`
	Timeout  Duration    `json:"timeout,omitempty"`
	Rise     int         `json:"rise,omitempty"` // consecutive successes to go up
	Fall     int         `json:"fall,omitempty"` // consecutive failures to go down
}

// CommandName names a health-check command that an edge's own
// configuration lists (azgate edge --health-command NAME=/abs/path args,
// or --health-commands FILE): 1-32 of a-z, 0-9 and '-'. Checks used to
// carry an argv taken from the API and run it as root on every edge, so
// anyone holding an API token could run code there (issue 7). Now the API
// only picks among commands an edge's operator chose.
type CommandName string

var commandNameRE = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// ValidCommandName reports whether s is a valid CommandName.
func ValidCommandName(s string) bool { return commandNameRE.MatchString(s) }

// UnmarshalJSON takes a JSON string; it refuses the former argv (a JSON
// list) with an error that says what to do instead.
func (c *CommandName) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		return errors.New("a command check no longer carries a program and its arguments (a list): give the name of a command the edges list with --health-command NAME=/path (see docs/services.md)")
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("must be a string: the name of a command the edges list with --health-command")
	}
	*c = CommandName(s)
	return nil
}

// Duration is a time.Duration written as "2s" in JSON and YAML.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"2s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %v", s, err)
	}
	*d = Duration(v)
	return nil
}

func (s *Service) Key() string { return s.Name }

// Health is the controller's verdict on backends, from the majority of the
// edges' health checks: stored under KindHealth with the service's name,
// written by the controller only.
type Health struct {
	Service string `json:"service"`
	// Down lists the keys of backends the majority finds down, per pool.
	Down map[string][]string `json:"down,omitempty"`
}

// KindHealth is the kind of Health objects.
const KindHealth = "health"

// Limits of a service.
const (
	// MaxWeight bounds a backend's weight.
	MaxWeight = 1_000_000
	// SlotsPerBackend: a pool's table has at least this many slots per
	// backend, which keeps Maglev's imbalance and disruption low (NSDI'16,
	// section 5.3).
	SlotsPerBackend = maglev.SlotsPerBackend
	// MaxTableSize bounds TableSize: every edge holds M 4-byte slots per
	// pool (16 MiB at the maximum). It is the largest prime below 2^22.
	MaxTableSize = 4194301
	// MaxPoolBackends follows: 41,943 backends in one pool.
	MaxPoolBackends = MaxTableSize / SlotsPerBackend
	// TableSizeFactor bounds TableSize by the backends it serves: at most
	// this many times the size the rule asks for (DefaultTableSize, or the
	// smallest prime of at least 100 x the largest pool's backends). A
	// larger M buys little (Maglev's imbalance is already below 1 % at
	// 100 x N) and costs every edge of the set memory and CPU, so a
	// four-backend pool cannot ask for 4 million slots (issue 17).
	TableSizeFactor = 8
	// MaxPools bounds the pools of a service.
	MaxPools = 256
	// MaxListeners bounds the listeners of a service.
	MaxListeners = 1024
	// MaxRanges bounds a service's range listeners per protocol: the edge
	// keeps a (VIP, protocol)'s ranges as one sorted set and binary-searches
	// it (LB_RANGES_MAX in bpf/lib/consts.h; a test holds the two equal).
	MaxRanges = 64
)

// Listener protocols.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
)

// Health check types.
const (
	CheckTCP     = "tcp"     // a TCP connection is accepted
	CheckHTTP    = "http"    // GET Path answers Status
	CheckHTTPS   = "https"   // the same over TLS (the certificate is not verified)
	CheckUDP     = "udp"     // Send gets a reply
	CheckCommand = "command" // Command exits 0
)

// Health check defaults and bounds (see HealthCheck).
const (
	DefaultHealthInterval = 2 * time.Second
	DefaultHealthTimeout  = time.Second // or half the interval, if shorter
	MinHealthInterval     = 100 * time.Millisecond
	MaxHealthInterval     = time.Hour
	DefaultHealthRise     = 2
	DefaultHealthFall     = 3
	MaxHealthRiseFall     = 10
	DefaultHealthStatus   = 200
)

// MinCommandInterval is the shortest interval of a command check: each
// run is a fork and exec on every edge (65,536 backends at the general
// minimum would be 655,360 a second); the edges also run at most a few
// commands at once (health.DefaultCommandConcurrency).
const MinCommandInterval = time.Second

// AnyPort reports whether the listener takes every port of its protocol
// that no more specific listener of the service takes.
func (l Listener) AnyPort() bool { return l.Port == 0 && l.PortEnd == 0 }

// Last is the last port the listener covers (Port for a single port).
func (l Listener) Last() uint16 {
	if l.PortEnd > l.Port {
		return l.PortEnd
	}
	return l.Port
}

// Covers reports whether the listener is specific to port (a single port
// or a range holding it); any-port listeners cover nothing specifically.
func (l Listener) Covers(port uint16) bool { return !l.AnyPort() && port >= l.Port && port <= l.Last() }

// String writes the listener as the CLI reads it, without the pool:
// "tcp:80", "tcp:8000-8100", "udp:any".
func (l Listener) String() string {
	switch {
	case l.AnyPort():
		return l.Protocol + ":any"
	case l.Last() != l.Port:
		return fmt.Sprintf("%s:%d-%d", l.Protocol, l.Port, l.Last())
	}
	return fmt.Sprintf("%s:%d", l.Protocol, l.Port)
}

// ListenerFor returns the listener that takes a protocol and destination
// port in the data plane: a single port or range holding it first, else
// the protocol's any-port listener.
func (s *Service) ListenerFor(proto string, port uint16) (Listener, bool) {
	var anyL *Listener
	for i, l := range s.Listeners {
		if l.Protocol != proto {
			continue
		}
		if l.Covers(port) {
			return l, true
		}
		if l.AnyPort() && anyL == nil {
			anyL = &s.Listeners[i]
		}
	}
	if anyL != nil {
		return *anyL, true
	}
	return Listener{}, false
}

// Pool returns the named pool (a pointer into s.Pools) and its index.
func (s *Service) Pool(name string) (*Pool, int) {
	for i := range s.Pools {
		if s.Pools[i].Name == name {
			return &s.Pools[i], i
		}
	}
	return nil, -1
}

// Backend returns the index of the backend with a key.
func (p *Pool) Backend(key string) (int, bool) {
	for i, b := range p.Backends {
		if b.Key() == key {
			return i, true
		}
	}
	return -1, false
}

// Clone returns a deep copy, except for the Weight pointers, which are
// shared: their values are never changed in place (a new weight is a new
// pointer).
func (s *Service) Clone() *Service {
	c := *s
	c.Limits = s.Limits.Clone()
	c.Listeners = slices.Clone(s.Listeners)
	if s.Pools != nil {
		c.Pools = make([]Pool, len(s.Pools))
		for i, p := range s.Pools {
			p.Backends = slices.Clone(p.Backends)
			if p.Health != nil {
				h := *p.Health
				p.Health = &h
			}
			c.Pools[i] = p
		}
	}
	return &c
}

// Defaults fills every omitted setting with its default, in place, so the
// stored object says explicitly what the data plane and the checkers do:
// TableSize (DefaultTableSize, or the smallest prime of at least 100 x the
// largest pool's backends when that is more), each backend's Weight (1),
// and a health check's Path ("/") and Status (200) for http(s), Interval
// (2s), Timeout (1s, or half the interval when that is shorter), Rise (2)
// and Fall (3). A listener whose PortEnd equals its Port becomes a single
// port (PortEnd 0). The controller calls it before storing a service;
// Validate judges a service as Defaults would complete it.
func (s *Service) Defaults() {
	if s.TableSize == 0 {
		s.TableSize = DefaultTableSize
		if need := uint64(SlotsPerBackend) * uint64(s.largestPool()); need > DefaultTableSize && need <= MaxTableSize {
			s.TableSize = uint32(nextPrime(need))
		}
	}
	for i := range s.Listeners {
		if l := &s.Listeners[i]; l.PortEnd == l.Port {
			l.PortEnd = 0
		}
	}
	for i := range s.Pools {
		p := &s.Pools[i]
		for j := range p.Backends {
			if p.Backends[j].Weight == nil {
				one := uint32(1)
				p.Backends[j].Weight = &one
			}
		}
		if h := p.Health; h != nil {
			if h.Type == CheckHTTP || h.Type == CheckHTTPS {
				if h.Path == "" {
					h.Path = "/"
				}
				if h.Status == 0 {
					h.Status = DefaultHealthStatus
				}
			}
			if h.Interval == 0 {
				h.Interval = Duration(DefaultHealthInterval)
			}
			if h.Timeout == 0 && h.Interval > 0 {
				h.Timeout = min(Duration(DefaultHealthTimeout), h.Interval/2)
			}
			if h.Rise == 0 {
				h.Rise = DefaultHealthRise
			}
			if h.Fall == 0 {
				h.Fall = DefaultHealthFall
			}
		}
	}
}

// baseTableSize is the table size the 100 x N rule asks for a pool of n
// backends: DefaultTableSize, or the smallest prime of at least 100 x n.
func baseTableSize(n int) uint64 {
	return max(uint64(DefaultTableSize), nextPrime(uint64(SlotsPerBackend)*uint64(n)))
}

// MaxTableSizeFor is the largest TableSize a service whose largest pool
// has n backends may ask for: TableSizeFactor x baseTableSize(n), at most
// MaxTableSize.
func MaxTableSizeFor(n int) uint64 {
	return min(uint64(MaxTableSize), TableSizeFactor*baseTableSize(n))
}

// TableSlots is the Maglev slots the service costs every edge that builds
// it: TableSize (as Defaults would complete it) for each pool.
func (s *Service) TableSlots() uint64 {
	m := uint64(s.TableSize)
	if m == 0 {
		m = DefaultTableSize
		if need := uint64(SlotsPerBackend) * uint64(s.largestPool()); need > DefaultTableSize && need <= MaxTableSize {
			m = nextPrime(need)
		}
	}
	return m * uint64(len(s.Pools))
}

func (s *Service) largestPool() int {
	n := 0
	for _, p := range s.Pools {
		n = max(n, len(p.Backends))
	}
	return n
}

// Validate checks the service on its own, as Defaults would complete it
// (so a service with omitted settings and the same service as stored get
// the same verdict).
func (s *Service) Validate() Errors {
	c := s.Clone()
	c.Defaults()
	return c.validate()
}

func (s *Service) validate() Errors {
	var es Errors
	checkName(&es, "name", s.Name)
	checkVIP(&es, "vip", s.VIP)
	if s.Set != "" {
		checkName(&es, "set", s.Set)
	}
	s.Limits.validate(&es, "limits")
	switch s.Mode {
	case ModeEncap, ModeNAT:
	case "":
		es.add("mode", "required (encap or nat)")
	default:
		es.add("mode", "%q: want encap or nat", s.Mode)
	}
	if len(s.Description) > 1024 {
		es.add("description", "longer than 1024 characters")
	}

	pools := map[string]int{}
	switch {
	case len(s.Pools) == 0:
		es.add("pools", "at least one pool is required")
	case len(s.Pools) > MaxPools:
		es.add("pools", "%d pools: a service may have at most %d", len(s.Pools), MaxPools)
	}
	largest, largestPool := 0, ""
	for i, p := range s.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		checkName(&es, f+".name", p.Name)
		if j, dup := pools[p.Name]; dup && p.Name != "" {
			es.add(f+".name", "pool %q appears twice (also pools[%d])", p.Name, j)
		} else {
			pools[p.Name] = i
		}
		s.validateBackends(&es, f, &p)
		if len(p.Backends) > largest {
			largest, largestPool = len(p.Backends), p.Name
		}
		if p.Health != nil {
			p.Health.validate(&es, f+".health")
			// An encap backend is a guest whose private address means
			// nothing on the edge's network: tcp, http(s) and udp checks
			// reach it through its tunnel (docs/services.md); a command is
			// a program on the edge and cannot be given the tunnel.
			if s.Mode == ModeEncap && p.Health.Type == CheckCommand {
				es.add(f+".health.type", "a command check runs on the edge, which reaches an encap backend only through its tunnel: use tcp, http, https or udp (they travel the tunnel), or a nat-mode service")
			}
		}
	}
	if largest <= MaxPoolBackends {
		need := uint64(SlotsPerBackend) * uint64(largest)
		m := uint64(s.TableSize)
		switch {
		case m > MaxTableSize:
			es.add("tableSize", "%d is above the maximum %d", m, MaxTableSize)
		case !isPrime(m):
			es.add("tableSize", "%d is not a prime (try %d)", m, nextPrime(max(m, need)))
		case m < need:
			es.add("tableSize", "%d is less than %d x the %d backends of pool %q (try %d)", m, SlotsPerBackend, largest, largestPool, nextPrime(need))
		case m > MaxTableSizeFor(largest):
			es.add("tableSize", "%d is above %d, %d x the size %d backends need (%d): a larger table buys no balance and costs every edge memory",
				m, MaxTableSizeFor(largest), TableSizeFactor, largest, baseTableSize(largest))
		}
	}

	switch {
	case len(s.Listeners) == 0:
		es.add("listeners", "at least one listener is required")
	case len(s.Listeners) > MaxListeners:
		es.add("listeners", "%d listeners: a service may have at most %d (use port ranges)", len(s.Listeners), MaxListeners)
	}
	type span struct {
		lo, hi uint16
		i      int
	}
	spans := map[string][]span{}
	anyAt := map[string]int{}
	ranges := map[string]int{} // range listeners by protocol
	for i, l := range s.Listeners {
		f := fmt.Sprintf("listeners[%d]", i)
		ok := true
		switch l.Protocol {
		case ProtoTCP, ProtoUDP:
		case "":
			es.add(f+".protocol", "required (tcp or udp)")
			ok = false
		default:
			es.add(f+".protocol", "%q: want tcp or udp", l.Protocol)
			ok = false
		}
		switch {
		case l.Port == 0 && l.PortEnd != 0:
			es.add(f+".port", "a range needs its first port (1-65535); port 0 without portEnd means any port")
			ok = false
		case l.PortEnd != 0 && l.PortEnd < l.Port:
			es.add(f+".portEnd", "%d is below port %d", l.PortEnd, l.Port)
			ok = false
		}
		if l.Pool == "" {
			es.add(f+".pool", "required")
		} else if _, found := pools[l.Pool]; !found {
			es.add(f+".pool", "pool %q is not one of the service's pools", l.Pool)
		}
		if !ok {
			continue
		}
		if !l.AnyPort() && l.Last() != l.Port {
			ranges[l.Protocol]++
		}
		if l.AnyPort() {
			if j, dup := anyAt[l.Protocol]; dup {
				es.add(f, "%s overlaps listeners[%d] (%s)", l, j, s.Listeners[j])
			} else {
				anyAt[l.Protocol] = i
			}
			continue
		}
		spans[l.Protocol] = append(spans[l.Protocol], span{l.Port, l.Last(), i})
	}
	for _, proto := range sortedKeys(spans) {
		sp := spans[proto]
		sort.Slice(sp, func(a, b int) bool {
			if sp[a].lo != sp[b].lo {
				return sp[a].lo < sp[b].lo
			}
			return sp[a].i < sp[b].i
		})
		far := sp[0] // the span reaching furthest so far
		for _, x := range sp[1:] {
			if x.lo <= far.hi {
				a, b := far.i, x.i
				if a > b {
					a, b = b, a
				}
				es.add(fmt.Sprintf("listeners[%d]", b), "%s overlaps listeners[%d] (%s)", s.Listeners[b], a, s.Listeners[a])
			}
			if x.hi > far.hi {
				far = x
			}
		}
	}
	for _, proto := range sortedKeys(ranges) {
		if n := ranges[proto]; n > MaxRanges {
			es.add("listeners", "%d %s port ranges: a service may have at most %d per protocol (the edge searches them as one set)", n, proto, MaxRanges)
		}
	}
	return es
}

func (s *Service) validateBackends(es *Errors, f string, p *Pool) {
	switch {
	case len(p.Backends) == 0:
		es.add(f+".backends", "at least one backend is required (a weight of 0 drains one)")
	case len(p.Backends) > MaxPoolBackends:
		es.add(f+".backends", "%d backends: a pool may have at most %d (%d table slots each, tables of at most %d slots)",
			len(p.Backends), MaxPoolBackends, SlotsPerBackend, MaxTableSize)
	}
	keys := map[string]int{}
	for j, b := range p.Backends {
		bf := fmt.Sprintf("%s.backends[%d]", f, j)
		switch s.Mode {
		case ModeEncap:
			checkName(es, bf+".host", b.Host)
			checkName(es, bf+".guest", b.Guest)
			if b.Address.IsValid() {
				es.add(bf+".address", "an encap backend is a guest (host and guest), not an address")
			}
		case ModeNAT:
			// The edge translates within one family (DNAT44, DNAT66).
			switch {
			case s.VIP.Is6() && b.Address.Is4():
				es.add(bf+".address", "%v is IPv4 and the VIP %v IPv6: a nat backend's address is of its VIP's family", b.Address, s.VIP)
			case s.VIP.Is4() && b.Address.Is6():
				es.add(bf+".address", "%v is IPv6 and the VIP %v IPv4: a nat backend's address is of its VIP's family", b.Address, s.VIP)
			case s.VIP.Is6():
				checkNATBackend6(es, bf+".address", b.Address)
			default:
				checkUnicast4(es, bf+".address", b.Address)
			}
			if b.Host != "" {
				es.add(bf+".host", "a nat backend is an address; host and guest are for encap services")
			} else if b.Guest != "" {
				es.add(bf+".guest", "a nat backend is an address; host and guest are for encap services")
			}
		}
		if b.Weight != nil && *b.Weight > MaxWeight {
			es.add(bf+".weight", "%d is above the maximum %d", *b.Weight, MaxWeight)
		}
		k := b.Key()
		if j0, dup := keys[k]; dup {
			es.add(bf, "backend %s appears twice (also backends[%d])", k, j0)
		} else {
			keys[k] = j
			if s.Mode == ModeEncap && b.Host != "" && b.Guest != "" {
				// The host's agent knows a flow's port on the guest by
				// (VIP, guest, VIP port): one guest, one port per pool.
				g := "guest " + b.Host + "/" + b.Guest
				if j0, dup := keys[g]; dup {
					es.add(bf+".port", "guest %s/%s is already backends[%d] of this pool, on another port: a guest serves a pool on one port", b.Host, b.Guest, j0)
				} else {
					keys[g] = j
				}
			}
		}
	}
}

func (h *HealthCheck) validate(es *Errors, f string) {
	web := h.Type == CheckHTTP || h.Type == CheckHTTPS
	switch h.Type {
	case CheckTCP, CheckHTTP, CheckHTTPS, CheckUDP, CheckCommand:
	case "":
		es.add(f+".type", "required (tcp, http, https, udp or command)")
	default:
		es.add(f+".type", "%q: want tcp, http, https, udp or command", h.Type)
	}
	if web {
		switch {
		case !strings.HasPrefix(h.Path, "/"):
			es.add(f+".path", "%q must start with /", h.Path)
		case strings.ContainsFunc(h.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			es.add(f+".path", "%q has spaces or control characters (escape them: %%20)", h.Path)
		case len(h.Path) > 1024:
			es.add(f+".path", "longer than 1024 characters")
		}
		if h.Status < 100 || h.Status > 599 {
			es.add(f+".status", "%d is not an HTTP status (100-599)", h.Status)
		}
	} else {
		if h.Path != "" {
			es.add(f+".path", "only http and https checks have a path")
		}
		if h.Status != 0 {
			es.add(f+".status", "only http and https checks have a status")
		}
	}
	if h.Send != "" && h.Type != CheckUDP {
		es.add(f+".send", "only udp checks send a payload")
	}
	if len(h.Send) > 1024 {
		es.add(f+".send", "longer than 1024 bytes")
	}
	if h.Type == CheckCommand {
		switch {
		case h.Command == "":
			es.add(f+".command", "required for a command check: the name of a command the edges list (--health-command NAME=/path)")
		case !commandNameRE.MatchString(string(h.Command)):
			es.add(f+".command", "%q is not a command name (1-32 of a-z, 0-9 and '-'): a command check names a command the edges list with --health-command, it does not carry a program", string(h.Command))
		}
	} else if h.Command != "" {
		es.add(f+".command", "only command checks run a command")
	}
	iv, to := time.Duration(h.Interval), time.Duration(h.Timeout)
	switch {
	case iv < MinHealthInterval:
		es.add(f+".interval", "%v is shorter than the minimum %v", iv, MinHealthInterval)
	case h.Type == CheckCommand && iv < MinCommandInterval:
		es.add(f+".interval", "%v is shorter than the minimum %v of a command check (each run is a program started on every edge)", iv, MinCommandInterval)
	case iv > MaxHealthInterval:
		es.add(f+".interval", "%v is longer than the maximum %v", iv, MaxHealthInterval)
	}
	switch {
	case to <= 0:
		es.add(f+".timeout", "%v: must be positive", to)
	case to >= iv:
		es.add(f+".timeout", "%v is not shorter than the interval %v", to, iv)
	}
	if h.Rise < 1 || h.Rise > MaxHealthRiseFall {
		es.add(f+".rise", "%d is outside 1-%d", h.Rise, MaxHealthRiseFall)
	}
	if h.Fall < 1 || h.Fall > MaxHealthRiseFall {
		es.add(f+".fall", "%d is outside 1-%d", h.Fall, MaxHealthRiseFall)
	}
}

func isPrime(n uint64) bool { return maglev.IsPrime(n) }

// nextPrime is the smallest prime >= n.
func nextPrime(n uint64) uint64 {
	for !isPrime(n) {
		n++
	}
	return n
}

// NextPrime is the smallest prime of at least n: a table size to suggest.
func NextPrime(n uint64) uint64 { return nextPrime(n) }

// Validate checks a Health object on its own.
func (h *Health) Validate() Errors {
	var es Errors
	checkName(&es, "service", h.Service)
	for _, pool := range sortedKeys(h.Down) {
		checkName(&es, "down."+pool, pool)
		for i, k := range h.Down[pool] {
			if k == "" {
				es.add(fmt.Sprintf("down.%s[%d]", pool, i), "empty backend key")
			}
		}
	}
	return es
}

// IsDown reports whether the majority finds a pool's backend down.
func (h *Health) IsDown(pool, key string) bool {
	return h != nil && slices.Contains(h.Down[pool], key)
}

// DownSet returns the down backends of a pool as a set (empty, not nil).
func (h *Health) DownSet(pool string) map[string]bool {
	out := map[string]bool{}
	if h != nil {
		for _, k := range h.Down[pool] {
			out[k] = true
		}
	}
	return out
}

// DownCount is the number of down backends over all pools.
func (h *Health) DownCount() int {
	n := 0
	if h != nil {
		for _, ks := range h.Down {
			n += len(ks)
		}
	}
	return n
}

// Key is the service's name.
func (h *Health) Key() string { return h.Service }
