// Package bwstore is the per-AZ measurement store of shared bandwidth
// (issue 10): agents and edges write per-EIP rate reports for their AZ
// with a TTL, the AZ manager reads every live report of its AZ with its
// age, and writes the limits it pushes to each host with a generation.
//
// Two implementations share one contract (conformance_test.go runs the same
// suite against both): Mem, in-process and the default, and Redis, one
// redis-server per AZ reached through go-redis. A missing report is never
// reported as zero: it is absent, and what is present carries its age, so
// the managers can tell "no traffic" (a reporter said 0) from "no news".
package bwstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Direction says which way a rate or a limit counts traffic of an EIP.
type Direction uint8

const (
	// Egress is traffic from the guest behind the EIP to the Internet
	// (agents measure and enforce it).
	Egress Direction = 1
	// Ingress is traffic from the Internet to the EIP (edges measure and
	// enforce it).
	Ingress Direction = 2
)

// String is the one-letter form used in store keys: "e" or "i".
func (d Direction) String() string {
	switch d {
	case Egress:
		return "e"
	case Ingress:
		return "i"
	}
	return "d" + strconv.Itoa(int(d))
}

// Rate is one reporter's measurement of one EIP in one direction over its
// last interval. Drops are bytes the data plane dropped for the EIP's limit
// (so a manager can tell an EIP pinned at its limit and probe upward).
type Rate struct {
	EIP             netip.Addr
	Dir             Direction
	BytesPerSec     uint64
	PacketsPerSec   uint64
	DropBytesPerSec uint64
}

// Report is a Rate read back with who wrote it and how old it is. Age is
// the time since the reporter's write as seen by the store (Redis: its own
// clock through PTTL, so writer and reader clocks need not agree).
type Report struct {
	Reporter string
	Rate
	Age time.Duration
}

// Snapshot is every live report of one AZ, sorted by reporter, then EIP,
// then direction.
type Snapshot struct {
	AZ      string
	Reports []Report
	// Malformed names the reports the store held but no writer of this
	// package can have written (a bad field, value or TTL; a reporter
	// name that is not one), one "reporter: why" each (at most
	// MaxReporters). They are left out, absent as an expired report is,
	// so one corrupt entry does not blind the reader to the whole AZ; the
	// reader counts and logs them. Mem never has any.
	Malformed []string
}

// RateKey names what a report or a limit is about.
type RateKey struct {
	EIP netip.Addr
	Dir Direction
}

// ByEIP groups the snapshot's reports by EIP and direction; each group
// keeps the reporter order.
func (s Snapshot) ByEIP() map[RateKey][]Report {
	m := make(map[RateKey][]Report)
	for _, r := range s.Reports {
		k := RateKey{r.EIP, r.Dir}
		m[k] = append(m[k], r)
	}
	return m
}

// Limit is the rate and burst a host must enforce for one EIP and
// direction, in bytes per second and bytes.
type Limit struct {
	EIP        netip.Addr
	Dir        Direction
	RateBytes  uint64
	BurstBytes uint64
}

// Limits is the whole set of limits pushed to one host. Generation orders
// the writes: a store refuses a generation not above the last one it
// accepted for that host (ErrStaleGeneration), so a deposed manager cannot
// overwrite a newer one. Issued is the writer's clock, informational.
type Limits struct {
	Generation uint64
	Issued     time.Time
	Limits     []Limit
}

// HostLimits is Limits read back with its age in the store.
type HostLimits struct {
	Limits
	Age time.Duration
}

// Store is the per-AZ measurement store. Every method is bounded by the
// context and by the implementation's own call timeout.
type Store interface {
	// WriteReports replaces the reporter's previous report in the AZ with
	// rates, atomically, alive for ttl. Rates the reporter leaves out are
	// absent, not zero: a reporter reports 0 for an EIP it carries and saw
	// nothing on.
	WriteReports(ctx context.Context, az, reporter string, ttl time.Duration, rates []Rate) error
	// ReadReports returns every report of the AZ whose TTL has not run out.
	ReadReports(ctx context.Context, az string) (Snapshot, error)
	// WriteLimits replaces the host's limits if lim.Generation is above
	// the last generation accepted for the host (ErrStaleGeneration
	// otherwise); the limits expire after ttl, the generation does not.
	WriteLimits(ctx context.Context, az, host string, ttl time.Duration, lim Limits) error
	// ReadLimits returns the host's current limits; ok is false when there
	// are none (never written, or expired).
	ReadLimits(ctx context.Context, az, host string) (hl HostLimits, ok bool, err error)
	// LimitsGeneration is the cheap poll: the generation of the host's
	// current limits (ok false when there are none), without the limits.
	LimitsGeneration(ctx context.Context, az, host string) (gen uint64, ok bool, err error)
	Close() error
}

// Bounds. They keep one write, one read and the store itself finite.
const (
	// MaxRatesPerReport bounds one reporter's report (and one host's limits).
	MaxRatesPerReport = 1 << 18
	// MaxReporters bounds the live reporters of one AZ.
	MaxReporters = 4096
	// MaxTTL bounds report and limit TTLs.
	MaxTTL = time.Hour
	// MaxGeneration keeps generations exact in Redis's Lua numbers (2^53).
	MaxGeneration = 1<<53 - 1
	// MaxLimitRate bounds a limit's rate in bytes/s (2^53 bit/s, the
	// allocator's bound): a host turns it into bit/s (× 8) without
	// overflow, where a wrapped product would read as a tiny limit or as
	// 0, no limit. Packages stop at 10 Tbit/s, far below.
	MaxLimitRate = 1 << 50
	// MaxLimitBurst bounds a limit's burst in bytes (MaxLimitRate for
	// 64 s, above any package's burst of at most 10 s of its rate).
	MaxLimitBurst = 1 << 56
)

// Errors the stores return (wrapped with the AZ, reporter or host).
var (
	// ErrStaleGeneration: WriteLimits was refused for its generation; the
	// error is a *StaleGenerationError, which says the stored one.
	ErrStaleGeneration = errors.New("bwstore: generation not above the stored one")
	ErrInvalid         = errors.New("bwstore: invalid argument")
	ErrTooMany         = errors.New("bwstore: bound exceeded")
)

// StaleGenerationError is WriteLimits' refusal of a generation not above
// Stored, the last one accepted for the host. The fence outlives the
// limits (LimitsGeneration says nothing once they expired), so a writer
// that wants to take over moves its generations above Stored.
type StaleGenerationError struct {
	AZ, Host      string
	Given, Stored uint64
}

func (e *StaleGenerationError) Error() string {
	return fmt.Sprintf("%v: limits of %s in %s: generation %d, stored %d", ErrStaleGeneration, e.Host, e.AZ, e.Given, e.Stored)
}

// Unwrap makes errors.Is(err, ErrStaleGeneration) hold.
func (e *StaleGenerationError) Unwrap() error { return ErrStaleGeneration }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func checkName(what, s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("%w: %s %q: want 1-63 of [A-Za-z0-9._-], starting alphanumeric", ErrInvalid, what, s)
	}
	return nil
}

func checkTTL(what string, ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxTTL {
		return fmt.Errorf("%w: %s ttl %v: want 1ms..%v", ErrInvalid, what, ttl, MaxTTL)
	}
	return nil
}

func checkKey(what string, i int, a netip.Addr, d Direction) error {
	if !a.IsValid() || a.Zone() != "" {
		return fmt.Errorf("%w: %s[%d]: EIP %q is not an address without zone", ErrInvalid, what, i, a)
	}
	if d != Egress && d != Ingress {
		return fmt.Errorf("%w: %s[%d] (%s): direction %d is neither egress nor ingress", ErrInvalid, what, i, a, d)
	}
	return nil
}

func checkReports(az, reporter string, ttl time.Duration, rates []Rate) error {
	if err := checkName("az", az); err != nil {
		return err
	}
	if err := checkName("reporter", reporter); err != nil {
		return err
	}
	if err := checkTTL("report of "+reporter, ttl); err != nil {
		return err
	}
	if len(rates) > MaxRatesPerReport {
		return fmt.Errorf("%w: report of %s in %s: %d rates, at most %d", ErrTooMany, reporter, az, len(rates), MaxRatesPerReport)
	}
	seen := make(map[RateKey]struct{}, len(rates))
	for i, r := range rates {
		if err := checkKey("report of "+reporter+": rates", i, r.EIP, r.Dir); err != nil {
			return err
		}
		k := RateKey{r.EIP.Unmap(), r.Dir}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: report of %s: rates[%d]: %s/%s given twice", ErrInvalid, reporter, i, r.EIP, r.Dir)
		}
		seen[k] = struct{}{}
	}
	return nil
}

func checkLimits(az, host string, ttl time.Duration, lim Limits) error {
	if err := checkName("az", az); err != nil {
		return err
	}
	if err := checkName("host", host); err != nil {
		return err
	}
	if err := checkTTL("limits of "+host, ttl); err != nil {
		return err
	}
	if lim.Generation == 0 || lim.Generation > MaxGeneration {
		return fmt.Errorf("%w: limits of %s: generation %d: want 1..2^53-1", ErrInvalid, host, lim.Generation)
	}
	if len(lim.Limits) > MaxRatesPerReport {
		return fmt.Errorf("%w: limits of %s in %s: %d limits, at most %d", ErrTooMany, host, az, len(lim.Limits), MaxRatesPerReport)
	}
	seen := make(map[RateKey]struct{}, len(lim.Limits))
	for i, l := range lim.Limits {
		if err := checkKey("limits of "+host+": limits", i, l.EIP, l.Dir); err != nil {
			return err
		}
		if l.RateBytes > MaxLimitRate || l.BurstBytes > MaxLimitBurst {
			return fmt.Errorf("%w: limits of %s: limits[%d] (%s/%s): rate %d bytes/s, burst %d bytes: at most %d and %d", ErrInvalid, host, i, l.EIP, l.Dir, l.RateBytes, l.BurstBytes, uint64(MaxLimitRate), uint64(MaxLimitBurst))
		}
		k := RateKey{l.EIP.Unmap(), l.Dir}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: limits of %s: limits[%d]: %s/%s given twice", ErrInvalid, host, i, l.EIP, l.Dir)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// field is the hash field of an EIP and direction: "198.51.100.7/e".
func field(a netip.Addr, d Direction) string { return a.Unmap().String() + "/" + d.String() }

// parseField reads back a field as field writes it, and only so: an
// address with a zone, an IPv4-mapped or non-canonical spelling would
// otherwise read as a second entry for the same EIP and direction, which
// a writer can never produce.
func parseField(f string) (netip.Addr, Direction, error) {
	i := strings.LastIndexByte(f, '/')
	if i < 0 {
		return netip.Addr{}, 0, fmt.Errorf("field %.80q: no direction", f)
	}
	a, err := netip.ParseAddr(f[:i])
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("field %.80q: %v", f, err)
	}
	var d Direction
	switch f[i+1:] {
	case "e":
		d = Egress
	case "i":
		d = Ingress
	default:
		return netip.Addr{}, 0, fmt.Errorf("field %.80q: direction %.8q", f, f[i+1:])
	}
	if a.Zone() != "" || field(a, d) != f {
		return netip.Addr{}, 0, fmt.Errorf("field %.80q: not as written (want %s)", f, field(a.WithZone(""), d))
	}
	return a, d, nil
}

// encodeUints encodes a value as decimal numbers separated by spaces.
func encodeUints(v ...uint64) string {
	b := make([]byte, 0, 32)
	for i, x := range v {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, x, 10)
	}
	return string(b)
}

func decodeUints(s string, out ...*uint64) error {
	parts := strings.SplitN(s, " ", len(out)+1)
	if len(parts) != len(out) {
		return fmt.Errorf("value %.80q: want %d numbers", s, len(out))
	}
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return fmt.Errorf("value %.80q: not %d decimal numbers", s, len(out))
		}
		*out[i] = x
	}
	return nil
}

func sortReports(rs []Report) {
	slices.SortFunc(rs, func(a, b Report) int {
		if c := strings.Compare(a.Reporter, b.Reporter); c != 0 {
			return c
		}
		return compareRate(a.Rate, b.Rate)
	})
}

func compareRate(a, b Rate) int {
	if c := a.EIP.Compare(b.EIP); c != 0 {
		return c
	}
	return int(a.Dir) - int(b.Dir)
}

func sortLimits(ls []Limit) {
	sort.Slice(ls, func(i, j int) bool {
		if c := ls[i].EIP.Compare(ls[j].EIP); c != 0 {
			return c < 0
		}
		return ls[i].Dir < ls[j].Dir
	})
}

// WaitLimits polls s every `every` until the host's limits carry a
// generation above after, and returns them; it is how an agent follows its
// limits without a watch (one HGET per poll while nothing changes).
func WaitLimits(ctx context.Context, s Store, az, host string, after uint64, every time.Duration) (HostLimits, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		gen, ok, err := s.LimitsGeneration(ctx, az, host)
		if err != nil {
			return HostLimits{}, err
		}
		if ok && gen > after {
			hl, ok, err := s.ReadLimits(ctx, az, host)
			if err != nil {
				return HostLimits{}, err
			}
			if ok && hl.Generation > after {
				return hl, nil
			}
		}
		select {
		case <-ctx.Done():
			return HostLimits{}, ctx.Err()
		case <-t.C:
		}
	}
}
