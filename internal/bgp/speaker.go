// Package bgp is the edge's BGP speaker: an embedded GoBGP v3 server
// (github.com/osrg/gobgp/v3/pkg/server) that advertises the edge set's
// prefixes to the upstream routers, so their ECMP spreads flows over the
// set's members (issue 8, docs/bgp.md).
//
// The speaker never listens for BGP: GoBGP's ListenPort is -1, so no
// socket of ours accepts a connection and nothing on the Internet side
// (nor a local user) can reach a BGP socket of the edge. It only dials
// the peers it is configured with; routers must be configured to accept
// the session (BIRD: `passive on` is fine, an active router's connection
// attempts are refused by the kernel).
//
// Routes received from the routers are rejected on import (the edge is
// not a transit: it never re-advertises what it hears), but counted.
//
// IPv4 unicast is always carried. IPv6 unicast (MP-BGP, RFC 4760) is
// carried too when the configuration has an IPv6 next hop (NextHop6):
// every session then negotiates both families, whatever its transport,
// and IPv6 prefixes (a set's IPv6 prefixes, /128 pull-outs) are
// announced with that next hop in MP_REACH_NLRI. Without NextHop6 the
// sessions and what they carry are exactly the IPv4-only ones. A peer's
// address (the session's transport) may be IPv4 or IPv6.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/azgate/azgate/internal/model"
)

// Peer is one upstream router the speaker dials.
type Peer struct {
	Address  netip.Addr
	ASN      uint32
	Password string // TCP MD5 signature (RFC 2385); empty: none
	Port     uint16 // 0: 179
}

// Config is the speaker's whole configuration; Configure takes it
// declaratively.
type Config struct {
	RouterID netip.Addr // IPv4
	ASN      uint32     // local AS
	Peers    []Peer
	// HoldTime and Keepalive are proposed to every peer (whole seconds;
	// the session uses the smaller hold time of the two sides, RFC 4271
	// 4.2). Zero: 9 s and 3 s.
	HoldTime  time.Duration
	Keepalive time.Duration
	// NextHop is the address announced as the routes' next hop: the
	// edge's address on the router's segment.
	NextHop netip.Addr
	// NextHop6, if set, is the next hop of the IPv6 routes (the edge's
	// global IPv6 address on the router's segment), and enables IPv6
	// unicast on every session. Unset: IPv4 unicast only, and IPv6
	// prefixes cannot be announced.
	NextHop6 netip.Addr
	// LocalAddress, if set, is the source address of the sessions
	// (several speakers on one host, or an edge with several addresses).
	LocalAddress netip.Addr
	// LocalAddress6, if set, is the source address of the sessions to
	// IPv6 peers (LocalAddress is IPv4).
	LocalAddress6 netip.Addr
	// ConnectRetry is how long to wait between connection attempts to a
	// peer that is down (zero: 2 s; GoBGP's default of 120 s would keep a
	// restarted router without our routes for minutes).
	ConnectRetry time.Duration
}

const (
	defaultHold      = 9 * time.Second
	defaultKeepalive = 3 * time.Second
	defaultRetry     = 2 * time.Second
)

func (c Config) normalized() Config {
	if c.HoldTime == 0 {
		c.HoldTime = defaultHold
	}
	if c.Keepalive == 0 {
		c.Keepalive = c.HoldTime / 3
		if c.Keepalive == 0 {
			c.Keepalive = defaultKeepalive
		}
	}
	if c.ConnectRetry == 0 {
		c.ConnectRetry = defaultRetry
	}
	for i := range c.Peers {
		if c.Peers[i].Port == 0 {
			c.Peers[i].Port = 179
		}
	}
	return c
}

// Validate checks the configuration; errors name the field.
func (c Config) Validate() error {
	if !c.RouterID.Is4() {
		return fmt.Errorf("bgp: router_id %v: must be an IPv4 address", c.RouterID)
	}
	if c.ASN == 0 {
		return errors.New("bgp: asn: must be set (1-4294967295)")
	}
	if !c.NextHop.Is4() {
		return fmt.Errorf("bgp: next_hop %v: must be an IPv4 address", c.NextHop)
	}
	if c.NextHop6.IsValid() && !usable6(c.NextHop6) {
		return fmt.Errorf("bgp: next_hop6 %v: must be a global IPv6 unicast address", c.NextHop6)
	}
	if c.LocalAddress.IsValid() && !c.LocalAddress.Is4() {
		return fmt.Errorf("bgp: local address %v: must be IPv4", c.LocalAddress)
	}
	if c.LocalAddress6.IsValid() && !usable6(c.LocalAddress6) {
		return fmt.Errorf("bgp: local address6 %v: must be a global IPv6 unicast address", c.LocalAddress6)
	}
	hold := c.HoldTime
	if hold == 0 {
		hold = defaultHold
	}
	if hold%time.Second != 0 || hold < 3*time.Second {
		return fmt.Errorf("bgp: hold_time %v: whole seconds, at least 3 s (RFC 4271 4.2)", c.HoldTime)
	}
	if c.Keepalive != 0 && (c.Keepalive%time.Second != 0 || c.Keepalive < time.Second || c.Keepalive >= hold) {
		return fmt.Errorf("bgp: keepalive %v: whole seconds, less than the hold time %v", c.Keepalive, hold)
	}
	seen := map[netip.Addr]bool{}
	for i, p := range c.Peers {
		if !p.Address.Is4() && !usable6(p.Address) {
			return fmt.Errorf("bgp: peers[%d].address %v: must be an IPv4 or a global IPv6 unicast address", i, p.Address)
		}
		if seen[p.Address] {
			return fmt.Errorf("bgp: peers[%d].address %v: listed twice", i, p.Address)
		}
		seen[p.Address] = true
		if p.ASN == 0 {
			return fmt.Errorf("bgp: peers[%d] (%v).asn: must be set", i, p.Address)
		}
		if len(p.Password) > 80 { // TCP_MD5SIG_MAXKEYLEN
			return fmt.Errorf("bgp: peers[%d] (%v).password: at most 80 bytes", i, p.Address)
		}
	}
	return nil
}

// usable6 reports whether a is a global IPv6 unicast address (no zone,
// not IPv4-mapped).
func usable6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.Zone() == "" && !a.IsUnspecified() && !a.IsLoopback() &&
		!a.IsMulticast() && !a.IsLinkLocalUnicast()
}

// SpeakerAPI is what an announcer needs of a BGP speaker: *Speaker, or
// a test's fake. The edge's announcer (internal/edge) and the cluster
// route announcer (internal/announce) both take one.
type SpeakerAPI interface {
	Configure(ctx context.Context, c Config) error
	Announce(ctx context.Context, prefixes []netip.Prefix) error
	WaitWithdrawn(ctx context.Context, timeout time.Duration) error
	Status(ctx context.Context) *model.BGPStatus
	Stop()
}

var _ SpeakerAPI = (*Speaker)(nil)

// Speaker is the embedded BGP speaker. Its methods are safe for
// concurrent use.
type Speaker struct {
	log *slog.Logger

	mu      sync.Mutex
	srv     *server.BgpServer
	started bool
	cfg     Config
	// want is the set to advertise (Announce); adv what is in the RIB.
	want map[netip.Prefix]bool
	adv  map[netip.Prefix]bool
	// pending holds, for each peer that had routes from us when they were
	// last withdrawn, the count of UPDATE messages sent to it before:
	// WaitWithdrawn waits for a later one (the withdrawal on the wire).
	pending map[netip.Addr]uint64
	// stale are paths still in the RIB that a withdrawal failed to take
	// out while nothing else names them (IPv6 turned off): sync retries
	// them until the RIB lets them go.
	stale map[netip.Prefix]bool
}

// New returns a speaker that does nothing until Configure.
func New(log *slog.Logger) *Speaker {
	if log == nil {
		log = slog.Default()
	}
	return &Speaker{log: log, want: map[netip.Prefix]bool{}, adv: map[netip.Prefix]bool{}, pending: map[netip.Addr]uint64{},
		stale: map[netip.Prefix]bool{}}
}

// Configure applies a configuration. The first call starts the server.
// Later calls add, remove and update peers one by one (a changed peer's
// session alone is reset); a changed router ID or local ASN restarts
// every session (BGP has no other way); a changed next hop re-advertises
// the routes.
func (s *Speaker) Configure(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c = c.normalized()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started && (c.RouterID != s.cfg.RouterID || c.ASN != s.cfg.ASN) {
		s.log.Info("bgp: router ID or ASN changed: restarting every session", "router_id", c.RouterID, "asn", c.ASN)
		if err := s.srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
			return fmt.Errorf("bgp: stop to restart: %w", err)
		}
		s.started = false
		s.adv = map[netip.Prefix]bool{}
		s.pending = map[netip.Addr]uint64{}
		s.stale = map[netip.Prefix]bool{}
		s.cfg = Config{}
	}
	if !s.started {
		if err := s.start(ctx, c); err != nil {
			return err
		}
		s.cfg = Config{RouterID: c.RouterID, ASN: c.ASN}
	}
	old := map[netip.Addr]Peer{}
	for _, p := range s.cfg.Peers {
		old[p.Address] = p
	}
	// A session's families are fixed at OPEN: enabling or disabling IPv6
	// resets it, as new timers do.
	timersChanged := c.HoldTime != s.cfg.HoldTime || c.Keepalive != s.cfg.Keepalive ||
		c.ConnectRetry != s.cfg.ConnectRetry || c.LocalAddress != s.cfg.LocalAddress || c.LocalAddress6 != s.cfg.LocalAddress6 ||
		c.NextHop6.IsValid() != s.cfg.NextHop6.IsValid()
	// applied is what GoBGP holds once done: a peer it refused is left
	// out (and one it would not delete kept), so the next Configure tries
	// again instead of taking it as configured.
	var applied []Peer
	var errs []error
	for _, p := range c.Peers {
		o, ok := old[p.Address]
		delete(old, p.Address)
		if ok && o == p && !timersChanged {
			applied = append(applied, p)
			continue
		}
		if ok {
			if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
				errs = append(errs, fmt.Errorf("bgp: peer %v: remove to update: %w", p.Address, err))
				applied = append(applied, o)
				continue
			}
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(c, p)}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: peer %v: %w", p.Address, err))
			continue
		}
		applied = append(applied, p)
		s.log.Info("bgp: peer configured", "peer", p.Address, "asn", p.ASN, "md5", p.Password != "")
	}
	for a, o := range old {
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: peer %v: remove: %w", a, err))
			applied = append(applied, o)
			continue
		}
		delete(s.pending, a)
		s.log.Info("bgp: peer removed", "peer", a)
	}
	nhChanged := c.NextHop != s.cfg.NextHop
	nh6Changed := c.NextHop6 != s.cfg.NextHop6
	if nh6Changed && !c.NextHop6.IsValid() {
		// IPv6 off: take its paths out of the RIB (the sessions were
		// reset without the family, so no peer holds them any more).
		for p := range s.adv {
			if !p.Addr().Is6() {
				continue
			}
			path, err := s.path(p, true)
			if err == nil {
				err = s.srv.DeletePath(ctx, &api.DeletePathRequest{Family: v6unicast, Path: path})
			}
			if err != nil {
				// Forgotten here (IPv6 is off) but still in the RIB:
				// sync retries it.
				s.stale[p] = true
				errs = append(errs, fmt.Errorf("bgp: withdraw %v: %w", p, err))
			}
		}
	}
	s.cfg = c
	s.cfg.Peers = applied
	// Re-adding a path with a new next hop replaces the old one.
	for p := range s.adv {
		if p.Addr().Is4() && nhChanged || p.Addr().Is6() && nh6Changed {
			delete(s.adv, p)
		}
	}
	if err := s.sync(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startMu serializes StartBgp: GoBGP writes its route-selection options
// to package variables there (table.SelectionOptions,
// table.UseMultiplePaths), which races when two speakers of one process
// start at once. An edge runs one speaker. (Tests that run several still
// show, under -race, StartBgp's write against another server's read of
// those variables: always the same defaults, but GoBGP v3 offers no way
// around it.)
var startMu sync.Mutex

// start starts BGP on the speaker's one GoBGP server (made on first use:
// its Serve goroutine lives as long as the process, StopBgp and StartBgp
// reuse it).
func (s *Speaker) start(ctx context.Context, c Config) error {
	if s.srv == nil {
		s.srv = server.NewBgpServer(server.LoggerOption(&logger{l: s.log}))
		go s.srv.Serve()
	}
	srv := s.srv
	startMu.Lock()
	defer startMu.Unlock()
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:      c.ASN,
		RouterId: c.RouterID.String(),
		// -1: no listener at all (GoBGP opens one only for a positive
		// port). Sessions are always dialed by us.
		ListenPort: -1,
	}})
	if err != nil {
		return fmt.Errorf("bgp: start: %w", err)
	}
	// Reject everything the routers send (counted as received, never
	// installed nor re-advertised); accept our own (local) paths, which
	// the global import policy sees too.
	exists := false
	_ = srv.ListPolicy(ctx, &api.ListPolicyRequest{Name: rejectReceived}, func(*api.Policy) { exists = true })
	if !exists {
		err = srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: rejectReceived, Statements: []*api.Statement{
			{Name: rejectReceived + "-ebgp", Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_EXTERNAL},
				Actions: &api.Actions{RouteAction: api.RouteAction_REJECT}},
			{Name: rejectReceived + "-ibgp", Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_INTERNAL},
				Actions: &api.Actions{RouteAction: api.RouteAction_REJECT}},
		}}})
	}
	if err == nil {
		err = srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_IMPORT,
			Policies: []*api.Policy{{Name: rejectReceived}}, DefaultAction: api.RouteAction_ACCEPT,
		}})
	}
	if err != nil {
		srv.StopBgp(ctx, &api.StopBgpRequest{})
		return fmt.Errorf("bgp: import policy: %w", err)
	}
	s.started = true
	return nil
}

// rejectReceived is the import policy that drops the routers' routes.
const rejectReceived = "azgate-reject-received"

var (
	v4unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	v6unicast = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// familyOf is the address family a prefix is carried in.
func familyOf(p netip.Prefix) *api.Family {
	if p.Addr().Is6() {
		return v6unicast
	}
	return v4unicast
}

// families are the families the sessions negotiate.
func (c Config) families() []*api.Family {
	if c.NextHop6.IsValid() {
		return []*api.Family{v4unicast, v6unicast}
	}
	return []*api.Family{v4unicast}
}

func apiPeer(c Config, p Peer) *api.Peer {
	tr := &api.Transport{RemotePort: uint32(p.Port)}
	if p.Address.Is6() {
		if c.LocalAddress6.IsValid() {
			tr.LocalAddress = c.LocalAddress6.String()
		}
	} else if c.LocalAddress.IsValid() {
		tr.LocalAddress = c.LocalAddress.String()
	}
	var afs []*api.AfiSafi
	for _, f := range c.families() {
		afs = append(afs, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}})
	}
	return &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:          uint64(c.HoldTime / time.Second),
			KeepaliveInterval: uint64(c.Keepalive / time.Second),
			ConnectRetry:      uint64(c.ConnectRetry / time.Second),
			// Idle only briefly after a reset, then dial again.
			IdleHoldTimeAfterReset: 1,
		}},
		Transport: tr,
		AfiSafis:  afs,
	}
}

// Announce sets the prefixes to advertise: the full set, IPv4 and IPv6.
// Prefixes not in it are withdrawn, new ones advertised. Before Configure
// it only records the set. An IPv6 prefix needs the configuration's
// NextHop6: without it, it is not advertised (the error says so) while
// the others are.
func (s *Speaker) Announce(ctx context.Context, prefixes []netip.Prefix) error {
	want := map[netip.Prefix]bool{}
	for _, p := range prefixes {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return fmt.Errorf("bgp: announce %v: not an IPv4 or IPv6 prefix", p)
		}
		want[p.Masked()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = want
	return s.sync(ctx)
}

// WithdrawAll withdraws every prefix (Announce with an empty set).
func (s *Speaker) WithdrawAll(ctx context.Context) error {
	return s.Announce(ctx, nil)
}

// sync brings the RIB to s.want. Called with s.mu held.
func (s *Speaker) sync(ctx context.Context) error {
	if !s.started {
		return nil
	}
	var errs []error
	for p := range s.stale {
		path, err := s.path(p, true)
		if err == nil {
			err = s.srv.DeletePath(ctx, &api.DeletePathRequest{Family: familyOf(p), Path: path})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: withdraw %v (left in the RIB): %w", p, err))
			continue
		}
		delete(s.stale, p)
		s.log.Info("bgp: withdrawn (left in the RIB before)", "prefix", p)
	}
	var gone []netip.Prefix
	for p := range s.adv {
		if !s.want[p] {
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 {
		// Before the withdrawal is queued: the UPDATEs sent so far to the
		// peers that hold our routes.
		s.markPending(ctx)
	}
	for _, p := range gone {
		path, err := s.path(p, true)
		if err == nil {
			err = s.srv.DeletePath(ctx, &api.DeletePathRequest{Family: familyOf(p), Path: path})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: withdraw %v: %w", p, err))
			continue
		}
		delete(s.adv, p)
		s.log.Info("bgp: withdrawn", "prefix", p)
	}
	for p := range s.want {
		if s.adv[p] {
			continue
		}
		if p.Addr().Is6() && !s.cfg.NextHop6.IsValid() {
			errs = append(errs, fmt.Errorf("bgp: advertise %v: no IPv6 next hop configured (the edge's bgp.nextHop6)", p))
			continue
		}
		path, err := s.path(p, false)
		if err == nil {
			_, err = s.srv.AddPath(ctx, &api.AddPathRequest{Path: path})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: advertise %v: %w", p, err))
			continue
		}
		s.adv[p] = true
		nh := s.cfg.NextHop
		if p.Addr().Is6() {
			nh = s.cfg.NextHop6
		}
		s.log.Info("bgp: advertised", "prefix", p, "next_hop", nh)
	}
	return errors.Join(errs...)
}

func (s *Speaker) path(p netip.Prefix, withdraw bool) (*api.Path, error) {
	if p.Addr().Is6() {
		// IPv6 NLRI travel in MP_REACH_NLRI, with their next hop
		// (RFC 4760); a withdrawal names the NLRI alone.
		nlri := bgp.NewIPv6AddrPrefix(uint8(p.Bits()), p.Addr().String())
		nh := s.cfg.NextHop6
		if !nh.IsValid() {
			nh = netip.IPv6Unspecified()
		}
		attrs := []bgp.PathAttributeInterface{
			bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
			bgp.NewPathAttributeMpReachNLRI(nh.String(), []bgp.AddrPrefixInterface{nlri}),
		}
		return apiutil.NewPath(nlri, withdraw, attrs, time.Now())
	}
	nlri := bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String())
	attrs := []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		bgp.NewPathAttributeNextHop(s.cfg.NextHop.String()),
	}
	return apiutil.NewPath(nlri, withdraw, attrs, time.Now())
}

// markPending records the sent-UPDATE count of every established peer
// that advertises at least one of our routes.
func (s *Speaker) markPending(ctx context.Context) {
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil || p.GetState().GetSessionState() != api.PeerState_ESTABLISHED {
			return
		}
		if advertisedTo(p) == 0 {
			return
		}
		// The latest count: an UPDATE after it is one queued no earlier
		// than this withdrawal.
		s.pending[a] = p.GetState().GetMessages().GetSent().GetUpdate()
	})
}

func advertisedTo(p *api.Peer) uint64 {
	var n uint64
	for _, af := range p.GetAfiSafis() {
		n += af.GetState().GetAdvertised()
	}
	return n
}

// WaitWithdrawn returns once every established peer has been sent the
// withdrawals made so far: its adj-RIB-out holds none of the withdrawn
// prefixes and at least one UPDATE has been written to its socket since
// they were withdrawn (GoBGP counts a message as sent once written). A
// peer whose session is down needs nothing: it has dropped our routes.
// It gives up after timeout (or when ctx ends) with an error naming the
// peers still waiting. GoBGP does not expose its send queue, so an UPDATE
// queued just before the withdrawal can be the one counted: the wait is
// exact when the speaker was quiet before withdrawing, as on SIGTERM.
func (s *Speaker) WaitWithdrawn(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		left, err := s.withdrawPending(ctx)
		if err == nil && len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("bgp: withdrawal not yet sent to %v: %w", left, err)
		case <-t.C:
		}
	}
}

func (s *Speaker) withdrawPending(ctx context.Context) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || len(s.pending) == 0 {
		return nil, nil
	}
	var left []netip.Addr
	var lerr error
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		before, ok := s.pending[a]
		if !ok {
			return
		}
		if p.GetState().GetSessionState() != api.PeerState_ESTABLISHED {
			delete(s.pending, a)
			return
		}
		stale, err := s.staleOut(ctx, a)
		if err != nil {
			lerr = err
		}
		if err != nil || stale || p.GetState().GetMessages().GetSent().GetUpdate() <= before {
			left = append(left, a)
			return
		}
		delete(s.pending, a)
	})
	if err == nil {
		err = lerr
	}
	sortAddrs(left)
	return left, err
}

// staleOut reports whether the peer's adj-RIB-out, in any family the
// sessions carry, still holds a prefix we no longer advertise.
func (s *Speaker) staleOut(ctx context.Context, peer netip.Addr) (bool, error) {
	stale := false
	for _, f := range s.cfg.families() {
		err := s.srv.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_ADJ_OUT, Name: peer.String(), Family: f},
			func(d *api.Destination) {
				p, err := netip.ParsePrefix(d.GetPrefix())
				if err != nil || !s.adv[p] {
					stale = true
				}
			})
		if err != nil {
			return stale, err
		}
	}
	return stale, nil
}

// Status returns the sessions and the advertised prefixes (Announcing and
// Failing are the caller's to fill).
func (s *Speaker) Status(ctx context.Context) *model.BGPStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &model.BGPStatus{Sessions: []model.BGPSession{}, Advertised: []string{}}
	if !s.started {
		return st
	}
	st.RouterID, st.ASN = s.cfg.RouterID.String(), s.cfg.ASN
	for _, p := range sortedPrefixes(s.adv) {
		st.Advertised = append(st.Advertised, p.String())
	}
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		ss := model.BGPSession{
			Peer:  p.GetConf().GetNeighborAddress(),
			ASN:   p.GetConf().GetPeerAsn(),
			State: sessionState(p.GetState().GetSessionState()),
		}
		if p.GetState().GetSessionState() == api.PeerState_ESTABLISHED {
			if up := p.GetTimers().GetState().GetUptime(); up != nil && up.GetSeconds() > 0 {
				ss.Since = up.AsTime().UTC()
			}
		}
		for _, af := range p.GetAfiSafis() {
			ss.Received += af.GetState().GetReceived()
			ss.Advertised += af.GetState().GetAdvertised()
		}
		st.Sessions = append(st.Sessions, ss)
	})
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].Peer < st.Sessions[j].Peer })
	return st
}

// Advertised returns the prefixes in the speaker's RIB, sorted.
func (s *Speaker) Advertised() []netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedPrefixes(s.adv)
}

// Stop closes every session (a Cease NOTIFICATION to each peer, which
// then drops our routes at once) and stops the server.
func (s *Speaker) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		s.srv.Stop()
		s.started = false
		s.adv = map[netip.Prefix]bool{}
		s.pending = map[netip.Addr]uint64{}
	}
}

func sessionState(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_IDLE:
		return "idle"
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

func sortedPrefixes(m map[netip.Prefix]bool) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

func sortAddrs(a []netip.Addr) { slices.SortFunc(a, netip.Addr.Compare) }
