//go:build !node

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/announce"
	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/probe"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/secretfile"
)

// announceFlags are azgate announce's flags, turned into an
// announce.Config by config.
type announceFlags struct {
	routerID, nextHop, nextHop6   string
	localAddr, localAddr6         string
	asn                           uint32
	vips, peers, checks           []string
	interval, timeout             time.Duration
	rise, fall                    int
	hold, keepalive, withdrawWait time.Duration
	statusListen, logLevel        string
}

func (f *announceFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringArrayVar(&f.vips, "vip", nil, "a cluster VIP: an IPv4 ADDR[/32] or an IPv6 ADDR[/128] (MP-BGP); repeatable, e.g. one of each for a dual-stack cluster: all are announced and withdrawn together")
	fl.StringVar(&f.routerID, "router-id", "", "the speaker's BGP router ID, an IPv4 address (default: --next-hop; required without it)")
	fl.Uint32Var(&f.asn, "asn", 0, "the local AS number")
	fl.StringArrayVar(&f.peers, "peer", nil, "a router to announce to: ADDR[:ASN][,port=P][,password-file=FILE], an IPv6 ADDR in brackets ([2001:db8::1]:64512) (repeatable; ASN default: --asn, iBGP)")
	fl.StringVar(&f.nextHop, "next-hop", "", "the next hop of the IPv4 VIPs: this server's IPv4 address on the router's segment (required with an IPv4 --vip)")
	fl.StringVar(&f.nextHop6, "next-hop6", "", "the next hop of the IPv6 VIPs: this server's global IPv6 address on the router's segment (required with an IPv6 --vip)")
	fl.StringVar(&f.localAddr, "local-address", "", "source address of the BGP sessions to IPv4 peers (default: the kernel's choice)")
	fl.StringVar(&f.localAddr6, "local-address6", "", "source address of the BGP sessions to IPv6 peers (default: the kernel's choice)")
	fl.StringArrayVar(&f.checks, "check", nil, "a local check, all of which must pass: http://ADDR[:PORT]/PATH, https://ADDR[:PORT]/PATH or tcp://ADDR:PORT (repeatable)")
	fl.DurationVar(&f.interval, "interval", time.Second, "time between two checks of one target")
	fl.DurationVar(&f.timeout, "timeout", 500*time.Millisecond, "a check's timeout (at most --interval)")
	fl.IntVar(&f.rise, "rise", 2, "consecutive successes for a check to count as up")
	fl.IntVar(&f.fall, "fall", 2, "consecutive failures for a check to count as down (the VIP is withdrawn at that check)")
	fl.DurationVar(&f.hold, "hold", 9*time.Second, "BGP hold time proposed to the router (whole seconds, at least 3 s): how long a dead server's route outlives it")
	fl.DurationVar(&f.keepalive, "keepalive", 0, "BGP keepalive interval (0: a third of --hold)")
	fl.DurationVar(&f.withdrawWait, "withdraw-wait", 5*time.Second, "on SIGTERM, how long to wait for the withdrawal to be sent")
	fl.StringVar(&f.statusListen, "status-listen", "", "loopback address for GET /metrics and /status, e.g. 127.0.0.1:9469 (empty: off)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
}

// config validates the flags into the announcer's configuration.
func (f *announceFlags) config() (announce.Config, error) {
	var c announce.Config
	if len(f.vips) == 0 {
		return c, errors.New("--vip is required (an IPv4 ADDR[/32], an IPv6 ADDR[/128], or one of each)")
	}
	var has4, has6 bool
	for _, s := range f.vips {
		p, err := parseVIP(s)
		if err != nil {
			return c, err
		}
		if slices.Contains(c.VIPs, p) {
			return c, fmt.Errorf("--vip %q: given twice", s)
		}
		c.VIPs = append(c.VIPs, p)
		has4 = has4 || p.Addr().Is4()
		has6 = has6 || p.Addr().Is6()
	}
	if f.asn == 0 {
		return c, errors.New("--asn is required (1-4294967295)")
	}
	c.BGP.ASN = f.asn
	var err error
	switch {
	case f.nextHop != "":
		if c.BGP.NextHop, err = parseV4("--next-hop", f.nextHop, "--next-hop6"); err != nil {
			return c, err
		}
		if !has4 {
			return c, fmt.Errorf("--next-hop %s: no --vip is IPv4 (an IPv6 VIP's next hop is --next-hop6)", f.nextHop)
		}
	case has4:
		return c, errors.New("--next-hop is required with an IPv4 --vip: this server's IPv4 address on the router's segment")
	}
	switch {
	case f.nextHop6 != "":
		if c.BGP.NextHop6, err = parseV6("--next-hop6", f.nextHop6, "--next-hop"); err != nil {
			return c, err
		}
		if !has6 {
			return c, fmt.Errorf("--next-hop6 %s: no --vip is IPv6 (an IPv4 VIP's next hop is --next-hop)", f.nextHop6)
		}
	case has6:
		return c, errors.New("--next-hop6 is required with an IPv6 --vip: this server's global IPv6 address on the router's segment")
	}
	c.BGP.RouterID = c.BGP.NextHop
	if f.routerID != "" {
		if c.BGP.RouterID, err = parseV4("--router-id", f.routerID, ""); err != nil {
			return c, err
		}
	} else if !c.BGP.RouterID.IsValid() {
		return c, errors.New("--router-id is required without --next-hop: a BGP router ID is an IPv4 address (any unique one)")
	}
	if !c.BGP.NextHop.IsValid() {
		// No IPv4 VIP: the speaker's IPv4 next hop is never announced.
		c.BGP.NextHop = c.BGP.RouterID
	}
	if f.localAddr != "" {
		if c.BGP.LocalAddress, err = parseV4("--local-address", f.localAddr, "--local-address6"); err != nil {
			return c, err
		}
	}
	if f.localAddr6 != "" {
		if c.BGP.LocalAddress6, err = parseV6("--local-address6", f.localAddr6, "--local-address"); err != nil {
			return c, err
		}
	}
	if f.hold%time.Second != 0 || f.hold < 3*time.Second {
		return c, fmt.Errorf("--hold %v: whole seconds, at least 3s", f.hold)
	}
	c.BGP.HoldTime = f.hold
	if f.keepalive != 0 && (f.keepalive%time.Second != 0 || f.keepalive >= f.hold) {
		return c, fmt.Errorf("--keepalive %v: whole seconds, less than --hold %v", f.keepalive, f.hold)
	}
	c.BGP.Keepalive = f.keepalive
	if len(f.peers) == 0 {
		return c, errors.New("--peer is required: the region's router (ADDR[:ASN][,port=P])")
	}
	for _, s := range f.peers {
		p, err := parseAnnouncePeer(s, f.asn)
		if err != nil {
			return c, err
		}
		c.BGP.Peers = append(c.BGP.Peers, p)
	}
	if len(f.checks) == 0 {
		return c, errors.New("--check is required: the application's heartbeat (http://...) and the Redis port (tcp://...)")
	}
	if f.interval < probe.MinInterval {
		return c, fmt.Errorf("--interval %v: at least %v", f.interval, probe.MinInterval)
	}
	if f.timeout <= 0 || f.timeout > f.interval {
		return c, fmt.Errorf("--timeout %v: positive and at most --interval %v", f.timeout, f.interval)
	}
	if f.rise < 1 || f.fall < 1 {
		return c, fmt.Errorf("--rise %d and --fall %d: at least 1", f.rise, f.fall)
	}
	base := probe.Spec{Interval: f.interval, Timeout: f.timeout, Rise: f.rise, Fall: f.fall}
	for _, s := range f.checks {
		t, err := announce.ParseCheck(s, base)
		if err != nil {
			return c, fmt.Errorf("--check: %w", err)
		}
		c.Checks = append(c.Checks, t)
	}
	if f.withdrawWait <= 0 {
		return c, fmt.Errorf("--withdraw-wait %v: must be positive", f.withdrawWait)
	}
	c.WithdrawWait = f.withdrawWait
	return c, c.Validate()
}

// parseVIP parses --vip: an IPv4 ADDR[/32] or an IPv6 ADDR[/128].
func parseVIP(s string) (netip.Prefix, error) {
	addr, bits, hasBits := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--vip %q: %q is not an IP address", s, addr)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("--vip %q: an address with a zone (%%%s): a VIP is a global address", s, a.Zone())
	}
	n := a.BitLen()
	if hasBits {
		if n, err = strconv.Atoi(bits); err != nil {
			return netip.Prefix{}, fmt.Errorf("--vip %q: length %q is not a number", s, bits)
		}
	}
	p := netip.PrefixFrom(a, n) // invalid if n is out of range: CheckVIP says so
	if err := announce.CheckVIP(p); err != nil {
		return netip.Prefix{}, fmt.Errorf("--vip %q: %w", s, err)
	}
	return p, nil
}

// parseV4 parses an IPv4 address; other names the flag an IPv6 one
// belongs to ("": none).
func parseV4(flag, s, other string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("%s %q: not an IPv4 address", flag, s)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%s %q: an IPv4-mapped IPv6 address: give the IPv4 address (%v)", flag, s, a.Unmap())
	case a.Is6() && other != "":
		return netip.Addr{}, fmt.Errorf("%s %q: an IPv6 address: give it as %s", flag, s, other)
	case !a.Is4():
		return netip.Addr{}, fmt.Errorf("%s %q: not an IPv4 address", flag, s)
	}
	return a, nil
}

// parseV6 parses a global IPv6 unicast address; other names the flag an
// IPv4 one belongs to.
func parseV6(flag, s, other string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("%s %q: not an IPv6 address", flag, s)
	case a.Is4():
		return netip.Addr{}, fmt.Errorf("%s %q: an IPv4 address: give it as %s", flag, s, other)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%s %q: an IPv4-mapped address: give the IPv4 address (%v) as %s", flag, s, a.Unmap(), other)
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s %q: an address with a zone: give a global address", flag, s)
	case a.IsLinkLocalUnicast():
		return netip.Addr{}, fmt.Errorf("%s %q: a link-local address: give this server's global IPv6 address on the segment", flag, s)
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast():
		return netip.Addr{}, fmt.Errorf("%s %q: not a global unicast address", flag, s)
	}
	return a, nil
}

// parseAnnouncePeer parses ADDR[:ASN][,port=P][,password-file=FILE].
func parseAnnouncePeer(s string, localASN uint32) (bgp.Peer, error) {
	var p bgp.Peer
	head, rest, _ := strings.Cut(s, ",")
	var addr, asn string
	var hasASN bool
	if strings.HasPrefix(head, "[") {
		// [IPv6]:ASN (RFC 3986's brackets: the colons are the address's)
		var ok bool
		addr, asn, ok = strings.Cut(head[1:], "]")
		if !ok || asn != "" && !strings.HasPrefix(asn, ":") {
			return p, fmt.Errorf("--peer %q: want [IPv6 ADDR] or [IPv6 ADDR]:ASN", s)
		}
		asn, hasASN = strings.CutPrefix(asn, ":")
	} else if strings.Count(head, ":") > 1 {
		return p, fmt.Errorf("--peer %q: an IPv6 address goes in brackets: [ADDR] or [ADDR]:ASN", s)
	} else {
		addr, asn, hasASN = strings.Cut(head, ":")
	}
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return p, fmt.Errorf("--peer %q: address %q is not an IP address", s, addr)
	case a.Is6() && !strings.HasPrefix(head, "["):
		return p, fmt.Errorf("--peer %q: an IPv6 address goes in brackets: [ADDR] or [ADDR]:ASN", s)
	case a.Is4() && strings.HasPrefix(head, "["):
		return p, fmt.Errorf("--peer %q: brackets are for IPv6 addresses", s)
	case a.Is6():
		if _, err := parseV6("--peer", addr, ""); err != nil {
			return p, fmt.Errorf("--peer %q: address %w", s, err)
		}
	}
	p.Address, p.ASN = a, localASN
	if hasASN {
		n, err := strconv.ParseUint(asn, 10, 32)
		if err != nil || n == 0 {
			return p, fmt.Errorf("--peer %q: ASN %q: want 1-4294967295", s, asn)
		}
		p.ASN = uint32(n)
	}
	if rest == "" {
		return p, nil
	}
	kv, err := keyValues("peer", rest, "port", "password-file")
	if err != nil {
		return p, err
	}
	if v, ok := kv["port"]; ok {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return p, fmt.Errorf("--peer %q: port %q is not a port", s, v)
		}
		p.Port = uint16(n)
	}
	if f, ok := kv["password-file"]; ok {
		if p.Password, err = secretfile.Read(f, "password file"); err != nil {
			return p, fmt.Errorf("--peer %q: %w", s, err)
		}
	}
	return p, nil
}

func init() {
	register(func() *cobra.Command {
		var f announceFlags
		c := &cobra.Command{
			Use:   "announce --vip ADDR[/LEN] [--vip ADDR6[/128]] --asn N --peer ADDR[:ASN] --next-hop ADDR [--next-hop6 ADDR6] --check URL [--check URL ...]",
			Short: "Announce a cluster VIP over BGP while this server's local checks pass",
			Long: `Runs on each server of a cluster (the design's Quagga role): announces
the cluster's VIPs over BGP to the region's router(s) while every --check
passes, so the router's ECMP spreads flows over the healthy servers. A VIP
is an IPv4 /32 (next hop --next-hop) or an IPv6 /128 (MP-BGP, next hop
--next-hop6); a dual-stack cluster gives one of each and both are announced
and withdrawn together. A check
goes down at the --fall-th consecutive failure and the VIP is withdrawn at
that check; it comes back after --rise successes of every check. Checks
start down: a new server announces only once it has passed.

On SIGTERM or SIGINT it withdraws the VIPs, waits until every established
peer was sent the withdrawal (at most --withdraw-wait), then exits. A server
that dies without that is removed by the router when the BGP hold time
(--hold) expires.

The speaker dials its peers and never listens for BGP. --status-listen (off
by default) serves GET /metrics and /status on a loopback address only
(docs/announce.md).`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(*cobra.Command) (func() error, error) {
			cfg, err := f.config()
			if err != nil {
				return nil, err
			}
			log, err := roleLogger(f.logLevel)
			if err != nil {
				return nil, err
			}
			if err := announce.CheckLoopback(f.statusListen); f.statusListen != "" && err != nil {
				return nil, fmt.Errorf("--status-listen: %w", err)
			}
			cfg.Log = log.With("role", "announce", "vips", cfg.VIPs)
			cfg.Node = nodemetrics.HostNode()
			a, err := announce.New(cfg, bgp.New(cfg.Log))
			if err != nil {
				return nil, err
			}
			return func() error {
				ctx, cancel := signalContext()
				defer cancel()
				if f.statusListen != "" {
					ln, err := announce.ListenLoopback(f.statusListen)
					if err != nil {
						return fmt.Errorf("--status-listen: %w", err)
					}
					sctx, scancel := context.WithCancel(context.Background())
					defer scancel()
					go func() {
						if err := a.Serve(sctx, ln); err != nil {
							log.Warn("status listener", "err", err)
						}
					}()
				}
				sdnotify.Tell(log, sdnotify.Ready) // configured, the status listener open
				return a.Run(ctx)
			}, nil
		})
		f.add(c)
		return c
	})
}
