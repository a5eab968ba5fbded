// Package ddos decides which addresses are under attack: the pure logic of
// the controller's DDoS detection (issue 9, part 4), with no store and no
// clock of its own, so that every rule can be tested by table.
//
// Each round the controller hands the detector every EIP's rates summed
// over the edges (packets, bits and TCP SYNs per second; model.RatesRoot)
// and the quarantines that exist. An EIP is attacked when a rate exceeds
// its trigger level, max(threshold, K × baseline): the threshold is an
// absolute floor (so a quiet EIP is not quarantined for a burst that is
// large only relative to its quiet past) and the baseline an exponentially
// weighted moving average of the EIP's rates while it is not attacked (so
// a busy EIP is judged against its own normal). Hysteresis on both sides:
// the detector quarantines only after Enter consecutive rounds above the
// trigger level, and releases only after every rate stayed below Release
// × the trigger level for the whole Cooldown; a rate between the two
// marks keeps the state as it is. It releases only what it quarantined
// (by "ddos"): an operator's quarantine is never touched.
//
// The UVER design this follows (ARCHITECTURE.md, design 1) moves an
// attacked EIP's /32 to a quarantine set so the attack lands on edges of
// its own and spares the EIPs that share the prefix set.
package ddos

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Rates of one address: packets, bits and TCP SYNs (without ACK) per second.
type Rates struct {
	PPS, BPS, SYN float64
}

// Over returns r with its zero fields taken from base.
func (r Rates) Over(base Rates) Rates {
	if r.PPS == 0 {
		r.PPS = base.PPS
	}
	if r.BPS == 0 {
		r.BPS = base.BPS
	}
	if r.SYN == 0 {
		r.SYN = base.SYN
	}
	return r
}

func (r Rates) String() string {
	return fmt.Sprintf("%.0f pps, %.0f bps, %.0f SYN/s", r.PPS, r.BPS, r.SYN)
}

// Defaults (Config.Check).
const (
	DefaultPPS      = 200_000
	DefaultBPS      = 2_000_000_000
	DefaultSYN      = 50_000
	DefaultK        = 4
	DefaultAlpha    = 0.02
	DefaultEnter    = 2
	DefaultRelease  = 0.5
	DefaultCooldown = 60 * time.Second
	DefaultMaxTrack = 1 << 20
)

// Config of the detector.
type Config struct {
	// Threshold: the absolute trigger levels. A zero field takes its
	// default (DefaultPPS, DefaultBPS, DefaultSYN); a negative one turns
	// that rate's check off.
	Threshold Rates
	// Override holds per-address thresholds that replace the set's and
	// Threshold (fields as in Threshold; a zero field inherits).
	Override map[netip.Addr]Rates
	// SetThreshold holds per-set thresholds that replace Threshold for
	// the addresses observed with that Observation.Set (a zero field
	// inherits Threshold's).
	SetThreshold map[string]Rates
	// K multiplies the baseline (0: DefaultK; at least 1).
	K float64
	// Alpha is the baseline's EWMA weight of one round (0: DefaultAlpha;
	// in (0, 1]).
	Alpha float64
	// Enter is how many consecutive rounds with new measurements must be
	// above the trigger level (0: DefaultEnter).
	Enter int
	// Release is the fraction of the trigger level every rate must stay
	// below for Cooldown before a release (0: DefaultRelease; in (0, 1]).
	Release float64
	// Cooldown (0: DefaultCooldown).
	Cooldown time.Duration
	// MaxTracked bounds the addresses the detector keeps state for
	// (0: DefaultMaxTrack); a new address beyond it is not judged until
	// room is made (counted in Dropped). The edges report their top-N
	// addresses only, so the bound is reached only with thousands of
	// edges each reporting different addresses.
	MaxTracked int
}

// Check fills the defaults in and validates c; errors name the setting.
func (c Config) Check() (Config, error) {
	fill := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&c.Threshold.PPS, DefaultPPS)
	fill(&c.Threshold.BPS, DefaultBPS)
	fill(&c.Threshold.SYN, DefaultSYN)
	fill(&c.K, DefaultK)
	fill(&c.Alpha, DefaultAlpha)
	fill(&c.Release, DefaultRelease)
	if c.Enter == 0 {
		c.Enter = DefaultEnter
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.MaxTracked == 0 {
		c.MaxTracked = DefaultMaxTrack
	}
	switch {
	case c.K < 1:
		return c, fmt.Errorf("ddos: baseline multiple %v: at least 1", c.K)
	case c.Alpha <= 0 || c.Alpha > 1:
		return c, fmt.Errorf("ddos: baseline weight %v: want (0, 1]", c.Alpha)
	case c.Release <= 0 || c.Release > 1:
		return c, fmt.Errorf("ddos: release fraction %v: want (0, 1]", c.Release)
	case c.Enter < 1:
		return c, fmt.Errorf("ddos: enter rounds %d: at least 1", c.Enter)
	case c.Cooldown < 0:
		return c, fmt.Errorf("ddos: cool-down %v: must be positive", c.Cooldown)
	case c.MaxTracked < 1:
		return c, fmt.Errorf("ddos: max tracked %d: at least 1", c.MaxTracked)
	}
	if c.Threshold.PPS < 0 && c.Threshold.BPS < 0 && c.Threshold.SYN < 0 {
		return c, fmt.Errorf("ddos: every threshold is off: nothing could trigger")
	}
	return c, nil
}

// Observation is one address's rates in a round, summed over Edges edges.
// Set names the SetThreshold entry that applies to the address (""
// none); the detector remembers it for the rounds the address is not
// observed.
type Observation struct {
	Rates
	Edges int
	Set   string
}

// Decision actions.
const (
	Quarantine = "quarantine"
	Release    = "release"
)

// Decision is what the detector asks the controller to do.
type Decision struct {
	Action string
	Addr   netip.Addr
	Rates  Rates // the rates that decided
	Limit  Rates // the trigger levels (quarantine) or release marks (release); 0: off
	Edges  int
	Reason string
}

type state struct {
	set         string // Observation.Set, last seen
	base        Rates
	learned     bool
	above       int
	quarantined bool
	calmSince   time.Time
}

// Detector holds the per-address state between rounds. Not safe for
// concurrent use.
type Detector struct {
	cfg  Config
	eips map[netip.Addr]*state
	// Dropped counts the rounds' addresses that found no room (MaxTracked).
	Dropped uint64
}

// New returns a detector; cfg must have passed Check.
func New(cfg Config) *Detector {
	return &Detector{cfg: cfg, eips: map[netip.Addr]*state{}}
}

// Config returns the detector's settings.
func (d *Detector) Config() Config { return d.cfg }

// SetConfig replaces the settings (they must have passed Check) and keeps
// what the detector learned: baselines, rounds above, quarantines and
// their cool-downs, which the new settings judge from the next round on
// (a DDoS policy changed at run time).
func (d *Detector) SetConfig(cfg Config) { d.cfg = cfg }

// Tracked is how many addresses the detector keeps state for.
func (d *Detector) Tracked() int { return len(d.eips) }

// Baseline returns an address's learned baseline.
func (d *Detector) Baseline(a netip.Addr) (Rates, bool) {
	if s := d.eips[a]; s != nil && s.learned {
		return s.base, true
	}
	return Rates{}, false
}

// Forget drops an address's state: the controller could not carry a
// quarantine out, and the address starts over.
func (d *Detector) Forget(a netip.Addr) { delete(d.eips, a) }

// limit is the trigger level of one rate: max(threshold, K × baseline),
// or 0 when the rate is not checked.
func (d *Detector) limit(a netip.Addr, s *state) Rates {
	th := d.cfg.Threshold
	if o, ok := d.cfg.SetThreshold[s.set]; ok && s.set != "" {
		th = o.Over(th)
	}
	if o, ok := d.cfg.Override[a]; ok {
		th = o.Over(th)
	}
	one := func(t, b float64) float64 {
		if t < 0 {
			return 0
		}
		return max(t, d.cfg.K*b)
	}
	return Rates{one(th.PPS, s.base.PPS), one(th.BPS, s.base.BPS), one(th.SYN, s.base.SYN)}
}

// over names the rates above lim (scaled by f), with their figures.
func over(r, lim Rates, f float64) []string {
	var out []string
	for _, x := range []struct {
		name    string
		v, l    float64
		formatV string
	}{{"pps", r.PPS, lim.PPS, "%.0f"}, {"bps", r.BPS, lim.BPS, "%.0f"}, {"SYN/s", r.SYN, lim.SYN, "%.0f"}} {
		if x.l > 0 && x.v > f*x.l {
			out = append(out, fmt.Sprintf("%s %.0f > %.0f", x.name, x.v, f*x.l))
		}
	}
	return out
}

// Step runs one round at now. obs holds the rates of every address an
// edge reported (an address absent is at rest); fresh says whether any
// edge reported new measurements since the last round (only fresh rounds
// count toward Enter and teach the baseline; the cool-down runs on the
// clock). quarantined maps every quarantined address to who decided it
// ("ddos" or anything else for an operator). Decisions come ordered by
// address.
func (d *Detector) Step(now time.Time, obs map[netip.Addr]Observation, fresh bool, quarantined map[netip.Addr]string) []Decision {
	var out []Decision
	// Quarantines made or lifted outside the detector.
	for a, s := range d.eips {
		by, q := quarantined[a]
		if s.quarantined && (!q || by != "ddos") {
			s.quarantined, s.above, s.calmSince = false, 0, time.Time{}
		}
	}
	for a, by := range quarantined {
		if by != "ddos" {
			continue
		}
		s := d.eips[a]
		if s == nil {
			// A quarantine from before this controller took over:
			// its cool-down starts now.
			s = &state{}
			d.eips[a] = s
		}
		s.quarantined = true
	}
	for a := range obs {
		if d.eips[a] != nil || !fresh {
			continue
		}
		if by, q := quarantined[a]; q && by != "ddos" {
			continue
		}
		if len(d.eips) >= d.cfg.MaxTracked {
			d.Dropped++ // no room: not judged this round
			continue
		}
		d.eips[a] = &state{}
	}
	for a, s := range d.eips {
		if by, q := quarantined[a]; q && by != "ddos" {
			continue // an operator's: not ours to judge
		}
		o, seen := obs[a]
		if seen && o.Set != s.set {
			s.set = o.Set
		}
		lim := d.limit(a, s)
		if s.quarantined {
			if hot := over(o.Rates, lim, d.cfg.Release); len(hot) > 0 {
				s.calmSince = time.Time{}
				continue
			}
			if s.calmSince.IsZero() {
				s.calmSince = now
			}
			if now.Sub(s.calmSince) >= d.cfg.Cooldown {
				marks := Rates{d.cfg.Release * lim.PPS, d.cfg.Release * lim.BPS, d.cfg.Release * lim.SYN}
				out = append(out, Decision{Action: Release, Addr: a, Rates: o.Rates, Limit: marks, Edges: o.Edges,
					Reason: fmt.Sprintf("automatic release: %v, below the release marks (%s) for %v",
						o.Rates, marksString(marks), d.cfg.Cooldown)})
				s.quarantined, s.above, s.calmSince = false, 0, time.Time{}
			}
			continue
		}
		if !fresh {
			continue
		}
		if len(over(o.Rates, lim, 1)) > 0 {
			s.above++
			if s.above >= d.cfg.Enter {
				out = append(out, d.quarantine(a, o, lim, s.above))
				s.quarantined, s.above, s.calmSince = true, 0, time.Time{}
			}
			continue
		}
		s.above = 0
		// The baseline starts at zero and only moves by Alpha a round:
		// taking a first reading whole would let the first, partial
		// interval of a flood (below the threshold) raise the trigger
		// level by K times itself.
		al := d.cfg.Alpha
		s.base.PPS += al * (o.PPS - s.base.PPS)
		s.base.BPS += al * (o.BPS - s.base.BPS)
		s.base.SYN += al * (o.SYN - s.base.SYN)
		s.learned = true
		// An address that went quiet and whose baseline no longer
		// raises its trigger level above the thresholds is forgotten.
		if !seen && d.limit(a, s) == d.limit(a, &state{set: s.set}) && s.base.PPS < 1 {
			delete(d.eips, a)
		}
	}
	slices.SortFunc(out, func(x, y Decision) int { return x.Addr.Compare(y.Addr) })
	return out
}

func (d *Detector) quarantine(a netip.Addr, o Observation, lim Rates, rounds int) Decision {
	hot := over(o.Rates, lim, 1)
	return Decision{Action: Quarantine, Addr: a, Rates: o.Rates, Limit: lim, Edges: o.Edges,
		Reason: fmt.Sprintf("automatic quarantine: %s for %d rounds, summed over %d edge(s) (%v)",
			strings.Join(hot, ", "), rounds, o.Edges, o.Rates)}
}

func marksString(m Rates) string {
	var parts []string
	for _, x := range []struct {
		n string
		v float64
	}{{"pps", m.PPS}, {"bps", m.BPS}, {"SYN/s", m.SYN}} {
		if x.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", x.n, x.v))
		}
	}
	return strings.Join(parts, ", ")
}
