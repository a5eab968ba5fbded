// Package probe checks targets (TCP connect, HTTP and HTTPS GET) on their
// own tickers and keeps an up/down state per target with rise and fall
// thresholds, so one lost packet does not move traffic and a flapping
// target does not flap what is built on it (issue 11 part 2,
// docs/probe.md).
//
// Users: the GSLB role (target VIPs, read through Monitor.Up on every
// query), the route announcer (local checks, InitialUp false) and
// several vantage points whose views Combine merges.
//
// The package opens no listening socket: it only dials the targets it is
// given, with a timeout on every dial and request.
package probe

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode"
)

// Kind is how a target is checked.
type Kind string

const (
	// TCP: a connection to Addr:Port is established (then closed).
	TCP Kind = "tcp"
	// HTTP: GET Path answers 2xx or 3xx. Redirects are not followed (a
	// 3xx is the server answering) and the body is ignored (at most
	// 4 KiB of it is read, so the connection closes cleanly).
	HTTP Kind = "http"
	// HTTPS: the same over TLS; the certificate is verified against
	// Host (or the address) unless Spec.Insecure.
	HTTPS Kind = "https"
)

// Spec is how one target is checked. Zero values get defaults via
// Normalize: Interval 1s, Timeout min(Interval, 1s), Rise 2, Fall 2,
// Path "/", Port 80 (http) or 443 (https). A TCP spec needs its Port.
type Spec struct {
	Kind     Kind
	Port     uint16
	Path     string // http(s)
	Host     string // http(s): Host header and TLS server name; "" = the address
	Insecure bool   // https: do not verify the certificate
	Interval time.Duration
	Timeout  time.Duration
	Rise     int // consecutive successes to go up
	Fall     int // consecutive failures to go down
}

// Limits of a Spec. The shortest interval keeps a monitor with many
// targets from turning into a load generator; the thresholds' bound keeps
// a typo (fall 1000) from making a target unremovable for hours.
const (
	MinInterval  = 100 * time.Millisecond
	MaxInterval  = time.Hour
	MinTimeout   = 10 * time.Millisecond
	MaxThreshold = 100
	maxPath      = 1024
	maxHost      = 253
	// bodyLimit is how much of an HTTP answer is read.
	bodyLimit = 4 << 10
)

const (
	defaultInterval = time.Second
	defaultTimeout  = time.Second
	defaultRise     = 2
	defaultFall     = 2
)

// Normalize returns s with its zero fields set to their defaults.
func (s Spec) Normalize() Spec {
	if s.Interval == 0 {
		s.Interval = defaultInterval
	}
	if s.Timeout == 0 {
		s.Timeout = min(s.Interval, defaultTimeout)
	}
	if s.Rise == 0 {
		s.Rise = defaultRise
	}
	if s.Fall == 0 {
		s.Fall = defaultFall
	}
	switch s.Kind {
	case HTTP, HTTPS:
		if s.Path == "" {
			s.Path = "/"
		}
		if s.Port == 0 {
			if s.Kind == HTTP {
				s.Port = 80
			} else {
				s.Port = 443
			}
		}
	}
	return s
}

// Validate checks the spec once normalized (zero fields are defaults, not
// errors). The error names the field: "probe interval 50ms: must be at
// least 100ms".
func (s Spec) Validate() error {
	n := s.Normalize()
	switch n.Kind {
	case TCP, HTTP, HTTPS:
	default:
		return fmt.Errorf("probe kind %q: must be tcp, http or https", s.Kind)
	}
	if n.Port == 0 {
		return fmt.Errorf("probe port 0: a %s check needs a port (1-65535)", n.Kind)
	}
	if n.Interval < MinInterval || n.Interval > MaxInterval {
		return fmt.Errorf("probe interval %v: must be at least %v and at most %v", n.Interval, MinInterval, MaxInterval)
	}
	if n.Timeout < MinTimeout || n.Timeout > n.Interval {
		return fmt.Errorf("probe timeout %v: must be at least %v and at most the interval (%v)", n.Timeout, MinTimeout, n.Interval)
	}
	if n.Rise < 1 || n.Rise > MaxThreshold {
		return fmt.Errorf("probe rise %d: must be 1-%d", n.Rise, MaxThreshold)
	}
	if n.Fall < 1 || n.Fall > MaxThreshold {
		return fmt.Errorf("probe fall %d: must be 1-%d", n.Fall, MaxThreshold)
	}
	if n.Kind == TCP {
		if n.Path != "" {
			return fmt.Errorf("probe path %q: only for http and https checks", n.Path)
		}
		if n.Host != "" {
			return fmt.Errorf("probe host %q: only for http and https checks", n.Host)
		}
	} else {
		if err := validPath(n.Path); err != nil {
			return err
		}
		if err := validHost(n.Host); err != nil {
			return err
		}
	}
	if n.Insecure && n.Kind != HTTPS {
		return fmt.Errorf("probe insecure: only for https checks (this one is %s)", n.Kind)
	}
	return nil
}

// validPath accepts an absolute path with an optional query, printable
// ASCII only: it goes on the request line as it is.
func validPath(p string) error {
	if len(p) > maxPath {
		return fmt.Errorf("probe path: %d bytes, at most %d", len(p), maxPath)
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("probe path %q: must start with /", p)
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return fmt.Errorf("probe path %q: only printable ASCII without spaces or #", p)
		}
	}
	return nil
}

// validHost accepts a DNS name or an IP address (for the Host header and
// the TLS server name).
func validHost(h string) error {
	if h == "" {
		return nil
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if len(h) > maxHost {
		return fmt.Errorf("probe host: %d bytes, at most %d", len(h), maxHost)
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return fmt.Errorf("probe host %q: not a DNS name or IP address", h)
		}
		for _, r := range label {
			if r > unicode.MaxASCII || !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return fmt.Errorf("probe host %q: not a DNS name or IP address", h)
			}
		}
	}
	return nil
}

// Target is one thing checked. Key is unique within a Monitor (e.g.
// "pathd.example/eu-1" or "192.0.2.10:443"); several targets may share an
// Addr.
type Target struct {
	Key  string
	Addr netip.Addr
	Spec Spec
}

const maxKey = 512

// Validate checks the target; the error names its key and the field.
func (t Target) Validate() error {
	if t.Key == "" {
		return errors.New("probe target: key must not be empty")
	}
	if len(t.Key) > maxKey {
		return fmt.Errorf("probe target %.40q...: key of %d bytes, at most %d", t.Key, len(t.Key), maxKey)
	}
	if !t.Addr.IsValid() || t.Addr.IsUnspecified() || t.Addr.IsMulticast() {
		return fmt.Errorf("probe target %q: addr %v: must be a unicast IP address", t.Key, t.Addr)
	}
	if t.Addr.Zone() != "" {
		// A zone names an interface of this host: the verdict would not
		// mean the same on another vantage point.
		return fmt.Errorf("probe target %q: addr %v: no IPv6 zone (%%%s): give a global address", t.Key, t.Addr, t.Addr.Zone())
	}
	if t.Addr.Is4In6() {
		return fmt.Errorf("probe target %q: addr %v: an IPv4-mapped IPv6 address: write IPv4 as IPv4 (%v)", t.Key, t.Addr, t.Addr.Unmap())
	}
	if err := t.Spec.Validate(); err != nil {
		return fmt.Errorf("probe target %q: %w", t.Key, err)
	}
	return nil
}
