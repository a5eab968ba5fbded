package model

import (
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// KindBandwidthPackage is the kind of BandwidthPackage objects.
const KindBandwidthPackage = "bandwidthpackages"

// Bounds of bandwidth packages (issue 10, docs/bandwidth.md "Packages").
// Rates are in bits per second.
const (
	// MinBandwidth is the smallest capacity and the smallest max of an
	// EIP: below 1 kbit/s a token bucket holds less than one packet per
	// second and the figure is a typo.
	MinBandwidth = 1_000
	// MaxBandwidth bounds a capacity, a min and a max: 10 Tbit/s is far
	// above any one package, and keeps sums over MaxPackageEIPs EIPs and
	// products with a burst of MaxBandwidthBurst from overflowing 64 bits
	// by a wide margin.
	MaxBandwidth = 10_000_000_000_000
	// MaxPackageEIPs bounds a package's list, so a package stays well
	// under etcd's default request limit of 1.5 MiB (about 100 bytes an
	// EIP) and an allocation round over it stays cheap.
	MaxPackageEIPs = 4096
	// MaxBandwidthPackages bounds the packages of a region (the issue's
	// scale target is 10,000).
	MaxBandwidthPackages = 100_000
	// MaxBandwidthWeight bounds an EIP's weight (1-10000).
	MaxBandwidthWeight = 10_000
)

// Bounds and default of a package's burst.
const (
	// DefaultBandwidthBurst: a bucket holds 20 ms of its rate. Every
	// bucket of a package full at once adds at most 2 % of the capacity
	// to any 1 s window, the overshoot bound of issue 10's benchmark,
	// while 20 ms of 100 Mbit/s is still 250 kB, some 170 full-size
	// packets.
	DefaultBandwidthBurst = 20 * time.Millisecond
	MinBandwidthBurst     = time.Millisecond
	MaxBandwidthBurst     = 10 * time.Second
)

// BandwidthPackage is a capacity shared by EIPs bound in any AZ
// (docs/bandwidth.md, "Packages"): the region manager splits Capacity
// among the EIPs by weighted max-min fairness, each EIP getting at least
// its Min when it wants it and never more than its Max, and the agents and
// edges enforce each EIP's share with token buckets.
type BandwidthPackage struct {
	Name string `json:"name"`
	// Capacity in bits per second (MinBandwidth-MaxBandwidth).
	Capacity uint64 `json:"capacity"`
	// Burst is a time, not a byte count: every token bucket that enforces
	// a share of the package holds Burst's worth of its own rate (a share
	// of r bit/s bursts r/8 x Burst bytes), so the burst splits with the
	// rate over EIPs and hosts and the package's total burst is always
	// Capacity x Burst. 0: DefaultBandwidthBurst (the controller stores
	// the default).
	Burst       Duration     `json:"burst,omitempty"`
	Description string       `json:"description,omitempty"`
	EIPs        []PackageEIP `json:"eips,omitempty"`
}

// PackageEIP is one EIP's place in a package.
type PackageEIP struct {
	Address netip.Addr `json:"address"`
	// Min is the guaranteed rate in bits per second: the EIP gets at
	// least this much when it wants it (0: no guarantee). The mins of a
	// package add up to at most its capacity.
	Min uint64 `json:"min,omitempty"`
	// Max caps the EIP in bits per second, whatever is spare (0: no cap
	// but the capacity; a max above the capacity is the capacity).
	Max uint64 `json:"max,omitempty"`
	// Weight is the EIP's share of what is left once mins are met,
	// relative to the package's other EIPs (1-10000; absent: 1, which
	// the controller stores).
	Weight *uint32 `json:"weight,omitempty"`
}

// Key of a package is its name.
func (p *BandwidthPackage) Key() string { return p.Name }

// W returns the EIP's weight (1 when omitted).
func (e *PackageEIP) W() uint32 {
	if e.Weight == nil {
		return 1
	}
	return *e.Weight
}

// BurstTime returns the package's burst, the default filled in.
func (p *BandwidthPackage) BurstTime() time.Duration {
	if p.Burst == 0 {
		return DefaultBandwidthBurst
	}
	return time.Duration(p.Burst)
}

// BurstBytes is the burst in bytes of a token bucket enforcing rate bits
// per second of this package: rate/8 x BurstTime, rounded down,
// saturating at the largest uint64. Enforcement may raise it to a floor
// (a bucket must hold at least its largest packet).
func (p *BandwidthPackage) BurstBytes(rate uint64) uint64 {
	hi, lo := bits.Mul64(rate, uint64(p.BurstTime()))
	const div = 8 * uint64(time.Second)
	if hi >= div {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, div)
	return q
}

// EIP returns the package's entry for address a.
func (p *BandwidthPackage) EIP(a netip.Addr) (PackageEIP, bool) {
	for _, e := range p.EIPs {
		if e.Address == a {
			return e, true
		}
	}
	return PackageEIP{}, false
}

// MinSum adds up the EIPs' mins (saturating: Validate refuses a sum above
// the capacity, so a valid package's sum is exact).
func (p *BandwidthPackage) MinSum() uint64 {
	var sum uint64
	for _, e := range p.EIPs {
		s, carry := bits.Add64(sum, e.Min, 0)
		if carry != 0 {
			return ^uint64(0)
		}
		sum = s
	}
	return sum
}

// Defaults fills the burst and every EIP's weight in place, so the stored
// package says what the managers and the data plane do. The controller
// calls it before storing a package; Validate judges a package as
// Defaults would complete it.
func (p *BandwidthPackage) Defaults() {
	if p.Burst == 0 {
		p.Burst = Duration(DefaultBandwidthBurst)
	}
	for i := range p.EIPs {
		if p.EIPs[i].Weight == nil {
			one := uint32(1)
			p.EIPs[i].Weight = &one
		}
	}
}

// Validate checks the package on its own: bounds, each EIP listed once,
// min ≤ max, and the mins within the capacity.
func (p *BandwidthPackage) Validate() Errors {
	var es Errors
	checkName(&es, "name", p.Name)
	switch {
	case p.Capacity == 0:
		es.add("capacity", "required: the package's capacity in bits per second (e.g. 100000000 for 100 Mbit/s)")
	case p.Capacity < MinBandwidth:
		es.add("capacity", "%d bit/s: at least %s", p.Capacity, FormatBitRate(MinBandwidth))
	case p.Capacity > MaxBandwidth:
		es.add("capacity", "%d bit/s (%s): at most %s", p.Capacity, FormatBitRate(p.Capacity), FormatBitRate(MaxBandwidth))
	}
	if b := time.Duration(p.Burst); b != 0 && (b < MinBandwidthBurst || b > MaxBandwidthBurst) {
		es.add("burst", "%v: want %v-%v of the rate (absent: %v)", b, MinBandwidthBurst, MaxBandwidthBurst, DefaultBandwidthBurst)
	}
	if len(p.Description) > 1024 {
		es.add("description", "longer than 1024 characters")
	}
	if len(p.EIPs) > MaxPackageEIPs {
		es.add("eips", "%d EIPs: a package has at most %d", len(p.EIPs), MaxPackageEIPs)
	}
	seen := make(map[netip.Addr]int, len(p.EIPs))
	bounded := true
	for i := range p.EIPs {
		e := &p.EIPs[i]
		f := fmt.Sprintf("eips[%d]", i)
		checkEIPAddress(&es, f+".address", e.Address)
		if e.Address.IsValid() {
			if j, dup := seen[e.Address]; dup {
				es.add(f+".address", "%v appears twice (eips[%d]): an EIP is listed once", e.Address, j)
			}
			seen[e.Address] = i
		}
		if e.Min > MaxBandwidth {
			es.add(f+".min", "%d bit/s: at most %s", e.Min, FormatBitRate(MaxBandwidth))
			bounded = false
		}
		switch {
		case e.Max == 0:
		case e.Max < MinBandwidth:
			es.add(f+".max", "%d bit/s: at least %s (absent: no cap)", e.Max, FormatBitRate(MinBandwidth))
		case e.Max > MaxBandwidth:
			es.add(f+".max", "%d bit/s: at most %s", e.Max, FormatBitRate(MaxBandwidth))
		case e.Min > e.Max:
			es.add(f+".min", "%s is above the EIP's max %s", FormatBitRate(e.Min), FormatBitRate(e.Max))
		}
		if e.Weight != nil && (*e.Weight < 1 || *e.Weight > MaxBandwidthWeight) {
			es.add(f+".weight", "%d: want 1-%d (absent: 1)", *e.Weight, MaxBandwidthWeight)
		}
	}
	if sum := p.MinSum(); bounded && p.Capacity > 0 && sum > p.Capacity {
		es.add("eips", "the EIPs' guaranteed minimums add up to %s (%d bit/s), more than the capacity %s (%d bit/s): lower a min or raise the capacity",
			FormatBitRate(sum), sum, FormatBitRate(p.Capacity), p.Capacity)
	}
	return es
}

// checkBandwidthPackage: every EIP listed exists and belongs to no other
// package; the region holds at most MaxBandwidthPackages.
func (s *State) checkBandwidthPackage(p, _ *BandwidthPackage, had bool) Errors {
	var es Errors
	for i, e := range p.EIPs {
		f := fmt.Sprintf("eips[%d].address", i)
		if _, ok := s.EIPs[e.Address.String()]; !ok {
			if svc, vip := s.vips[e.Address]; vip {
				es.add(f, "%v is the VIP of service %s, not an EIP: a package shares the bandwidth of EIPs", e.Address, svc)
			} else {
				es.add(f, "%v is not an EIP (create it first)", e.Address)
			}
			continue
		}
		if other, ok := s.bwOf[e.Address]; ok && other != p.Name {
			es.add(f, "EIP %v already belongs to bandwidth package %s (an EIP belongs to at most one package)", e.Address, other)
		}
	}
	if !had && len(s.BandwidthPackages) >= MaxBandwidthPackages {
		es.add("name", "the region has %d bandwidth packages, the most it may hold", len(s.BandwidthPackages))
	}
	return es
}

// indexBandwidthPackage keeps the EIP -> package index.
func (s *State) indexBandwidthPackage(p *BandwidthPackage, add bool) {
	for _, e := range p.EIPs {
		if add {
			s.bwOf[e.Address] = p.Name
		} else if s.bwOf[e.Address] == p.Name {
			delete(s.bwOf, e.Address)
		}
	}
}

// PackageOf returns the bandwidth package an EIP belongs to.
func (s *State) PackageOf(a netip.Addr) (string, bool) {
	p, ok := s.bwOf[a]
	return p, ok
}

// checkBandwidthRefs refuses deleting an EIP a package lists: the EIP is
// taken out of the package first, explicitly, as a firewall rule's
// destination is (deleting it silently would change the other EIPs'
// shares behind the operator's back).
func (s *State) checkBandwidthRefs(e *EIP) error {
	if p, ok := s.bwOf[e.Address]; ok {
		return &ConflictError{Msg: fmt.Sprintf("EIP %s belongs to bandwidth package %s: remove it from the package first (azgate bandwidth remove-eip %s %s)", e.Key(), p, p, e.Key())}
	}
	return nil
}

// ParseBitRate parses a rate in bits per second as people write it:
// a decimal number, an optional SI prefix (k, M, G or T, either case;
// decimal: k = 1000) and an optional unit (bit, bits, bit/s, bits/s, bps
// or b/s, lower-case b): "100000", "100M", "1.5G", "10Mbit", "250kbps".
// It is strict: no sign, exponent, spaces, binary prefixes (Mi) or bytes
// (B, MB/s), and the value must be a whole number of bits per second.
func ParseBitRate(s string) (uint64, error) {
	const want = "want bits per second: a number with an optional k, M, G or T and an optional bit, bit/s or bps (e.g. 100M, 1.5G, 10Mbit)"
	if s == "" {
		return 0, fmt.Errorf("empty rate: %s", want)
	}
	if len(s) > 64 {
		return 0, fmt.Errorf("rate %.20q...: longer than 64 characters", s)
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, rest := s[:i], s[i:]
	whole, frac, hasDot := strings.Cut(num, ".")
	if whole == "" || (hasDot && frac == "") || strings.Contains(frac, ".") {
		return 0, fmt.Errorf("rate %q: %s", s, want)
	}
	exp := 0
	if rest != "" {
		switch rest[0] {
		case 'k', 'K':
			exp, rest = 3, rest[1:]
		case 'm', 'M':
			exp, rest = 6, rest[1:]
		case 'g', 'G':
			exp, rest = 9, rest[1:]
		case 't', 'T':
			exp, rest = 12, rest[1:]
		}
	}
	switch rest {
	case "", "bit", "bits", "bit/s", "bits/s", "bps", "b/s":
	default:
		switch {
		case strings.HasPrefix(rest, "i"):
			return 0, fmt.Errorf("rate %q: binary prefixes are not taken, rates are decimal (k = 1000, M = 1000000)", s)
		case strings.HasPrefix(rest, "B") && !strings.HasPrefix(strings.ToLower(rest), "bit") || strings.Contains(strings.ToLower(rest), "byte"):
			return 0, fmt.Errorf("rate %q: bytes? rates are in bits per second (100M is 100 Mbit/s; 100 MB/s is 800M)", s)
		}
		return 0, fmt.Errorf("rate %q: %s", s, want)
	}
	// Exact decimal: whole and frac digits scaled by 10^exp.
	frac = strings.TrimRight(frac, "0")
	if len(frac) > exp {
		return 0, fmt.Errorf("rate %q is not a whole number of bits per second", s)
	}
	digits := whole + frac + strings.Repeat("0", exp-len(frac))
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: too large", s)
	}
	return v, nil
}

// FormatBitRate writes a rate exactly with the largest SI prefix it
// reaches: 100000000 is "100Mbit/s", 1500000000 "1.5Gbit/s", 999 "999bit/s".
// ParseBitRate reads it back.
func FormatBitRate(v uint64) string {
	prefixes := []struct {
		p string
		d uint64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}}
	for _, x := range prefixes {
		if v >= x.d {
			whole, rem := v/x.d, v%x.d
			s := strconv.FormatUint(whole, 10)
			if rem != 0 {
				width := len(strconv.FormatUint(x.d, 10)) - 1
				f := strings.TrimRight(fmt.Sprintf("%0*d", width, rem), "0")
				s += "." + f
			}
			return s + x.p + "bit/s"
		}
	}
	return strconv.FormatUint(v, 10) + "bit/s"
}
