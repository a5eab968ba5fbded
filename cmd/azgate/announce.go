//go:build !node

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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
	vip, routerID, nextHop, localAddr string
	asn                               uint32
	peers, checks                     []string
	interval, timeout                 time.Duration
	rise, fall                        int
	hold, keepalive, withdrawWait     time.Duration
	statusListen, logLevel            string
}

func (f *announceFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.vip, "vip", "", "the cluster's VIP, announced as a /32 (ADDR or ADDR/32)")
	fl.StringVar(&f.routerID, "router-id", "", "the speaker's BGP router ID (default: --next-hop)")
	fl.Uint32Var(&f.asn, "asn", 0, "the local AS number")
	fl.StringArrayVar(&f.peers, "peer", nil, "a router to announce to: ADDR[:ASN][,port=P][,password-file=FILE] (repeatable; ASN default: --asn, iBGP)")
	fl.StringVar(&f.nextHop, "next-hop", "", "the next hop announced: this server's address on the router's segment")
	fl.StringVar(&f.localAddr, "local-address", "", "source address of the BGP sessions (default: the kernel's choice)")
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
	if f.vip == "" {
		return c, errors.New("--vip is required")
	}
	v := f.vip
	if !strings.Contains(v, "/") {
		v += "/32"
	}
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() || p.Bits() != 32 {
		return c, fmt.Errorf("--vip %q: want an IPv4 address or /32", f.vip)
	}
	c.VIP = p
	if f.asn == 0 {
		return c, errors.New("--asn is required (1-4294967295)")
	}
	c.BGP.ASN = f.asn
	if f.nextHop == "" {
		return c, errors.New("--next-hop is required: this server's address on the router's segment")
	}
	if c.BGP.NextHop, err = parseV4("--next-hop", f.nextHop); err != nil {
		return c, err
	}
	c.BGP.RouterID = c.BGP.NextHop
	if f.routerID != "" {
		if c.BGP.RouterID, err = parseV4("--router-id", f.routerID); err != nil {
			return c, err
		}
	}
	if f.localAddr != "" {
		if c.BGP.LocalAddress, err = parseV4("--local-address", f.localAddr); err != nil {
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

func parseV4(flag, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%s %q: not an IPv4 address", flag, s)
	}
	return a, nil
}

// parseAnnouncePeer parses ADDR[:ASN][,port=P][,password-file=FILE].
func parseAnnouncePeer(s string, localASN uint32) (bgp.Peer, error) {
	var p bgp.Peer
	head, rest, _ := strings.Cut(s, ",")
	addr, asn, hasASN := strings.Cut(head, ":")
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() {
		return p, fmt.Errorf("--peer %q: address %q is not an IPv4 address", s, addr)
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
			Use:   "announce --vip ADDR/32 --asn N --peer ADDR[:ASN] --next-hop ADDR --check URL [--check URL ...]",
			Short: "Announce a cluster VIP over BGP while this server's local checks pass",
			Long: `Runs on each server of a cluster (the design's Quagga role): announces
the cluster's VIP /32 over BGP to the region's router(s) while every --check
passes, so the router's ECMP spreads flows over the healthy servers. A check
goes down at the --fall-th consecutive failure and the VIP is withdrawn at
that check; it comes back after --rise successes of every check. Checks
start down: a new server announces only once it has passed.

On SIGTERM or SIGINT it withdraws the VIP, waits until every established
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
			cfg.Log = log.With("role", "announce", "vip", cfg.VIP)
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
