package prober

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// resolver keeps the report host's address for the TTL the DNS gave it,
// clamped to [MinTTL, MaxTTL]. A host that is an IP needs no DNS.
type resolver struct {
	host    string
	servers []string
	fixed   netip.Addr
	v6First bool // AAAA before A (Config.ReportFamily "ipv6")

	mu      sync.Mutex
	addr    netip.Addr
	expires time.Time
}

func newResolver(host string, servers []string, v6First bool) *resolver {
	r := &resolver{host: host, servers: servers, v6First: v6First}
	if a, err := netip.ParseAddr(host); err == nil {
		r.fixed = a
	}
	return r
}

func (r *resolver) current() netip.Addr {
	if r.fixed.IsValid() {
		return r.fixed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// invalidate makes the next get ask the DNS again (a POST failed: the
// name may have moved).
func (r *resolver) invalidate() {
	r.mu.Lock()
	r.expires = time.Time{}
	r.mu.Unlock()
}

// get returns the address, asking the DNS when the cached one expired.
// fresh says it asked. On failure the last address (maybe invalid) is
// returned with the error.
func (r *resolver) get(ctx context.Context) (addr netip.Addr, fresh bool, err error) {
	if r.fixed.IsValid() {
		return r.fixed, false, nil
	}
	r.mu.Lock()
	if r.addr.IsValid() && time.Now().Before(r.expires) {
		defer r.mu.Unlock()
		return r.addr, false, nil
	}
	last := r.addr
	r.mu.Unlock()
	a, ttl, err := r.lookup(ctx)
	if err != nil {
		// Do not ask again at once for every POST: a dead DNS is retried
		// after MinTTL, the last address used meanwhile.
		r.mu.Lock()
		r.expires = time.Now().Add(MinTTL)
		r.mu.Unlock()
		return last, false, err
	}
	r.mu.Lock()
	r.addr, r.expires = a, time.Now().Add(min(max(ttl, MinTTL), MaxTTL))
	r.mu.Unlock()
	return a, true, nil
}

// lookup asks each server in turn for the host's A records (AAAA when it
// has none; the other way round with v6First), retrying over TCP when an
// answer is truncated.
func (r *resolver) lookup(ctx context.Context) (netip.Addr, time.Duration, error) {
	if len(r.servers) == 0 {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", r.host)
		if err != nil {
			return netip.Addr{}, 0, err
		}
		if len(ips) == 0 {
			return netip.Addr{}, 0, fmt.Errorf("%s: no address", r.host)
		}
		for _, ip := range ips {
			if ip = ip.Unmap(); ip.Is6() == r.v6First {
				return ip, MinTTL, nil
			}
		}
		return ips[0].Unmap(), MinTTL, nil
	}
	order := []uint16{dns.TypeA, dns.TypeAAAA}
	if r.v6First {
		order[0], order[1] = order[1], order[0]
	}
	var errs []error
	for _, qtype := range order {
		for _, s := range r.servers {
			a, ttl, err := r.ask(ctx, s, qtype)
			if err == nil {
				return a, ttl, nil
			}
			errs = append(errs, fmt.Errorf("%s %s: %w", s, dns.TypeToString[qtype], err))
		}
	}
	return netip.Addr{}, 0, errors.Join(errs...)
}

var errNoAddress = errors.New("no address in the answer")

func (r *resolver) ask(ctx context.Context, server string, qtype uint16) (netip.Addr, time.Duration, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(r.host), qtype)
	m.RecursionDesired = true
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	in, _, err := c.ExchangeContext(ctx, m, server)
	if err == nil && in.Truncated {
		c.Net = "tcp"
		in, _, err = c.ExchangeContext(ctx, m, server)
	}
	if err != nil {
		return netip.Addr{}, 0, err
	}
	if in.Id != m.Id {
		return netip.Addr{}, 0, errors.New("answer with another ID")
	}
	if in.Rcode != dns.RcodeSuccess {
		return netip.Addr{}, 0, fmt.Errorf("rcode %s", dns.RcodeToString[in.Rcode])
	}
	q := m.Question[0]
	if len(in.Question) != 1 || !strings.EqualFold(in.Question[0].Name, q.Name) || in.Question[0].Qtype != qtype {
		return netip.Addr{}, 0, errors.New("answer to another question")
	}
	return answerAddr(in.Answer, q.Name, qtype)
}

// answerAddr finds the address of name in an answer section: a record of
// type qtype owned by name, or by the end of the CNAME chain that starts
// at name. Records for any other name are ignored (a server, or a forger,
// must not steer the reports with them). The TTL is the chain's smallest.
func answerAddr(answer []dns.RR, name string, qtype uint16) (netip.Addr, time.Duration, error) {
	ttl := uint32(math.MaxUint32)
	// Each pass follows at most one CNAME; a chain longer than the answer
	// is a loop.
	for range len(answer) + 1 {
		next := ""
		for _, rr := range answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, name) {
				continue
			}
			var ip net.IP
			switch v := rr.(type) {
			case *dns.A:
				ip = v.A
			case *dns.AAAA:
				ip = v.AAAA
			case *dns.CNAME:
				if next == "" {
					next, ttl = v.Target, min(ttl, h.Ttl)
				}
				continue
			default:
				continue
			}
			if h.Rrtype != qtype {
				continue
			}
			if a, ok := netip.AddrFromSlice(ip); ok {
				return a.Unmap(), time.Duration(min(ttl, h.Ttl)) * time.Second, nil
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	return netip.Addr{}, 0, errNoAddress
}
