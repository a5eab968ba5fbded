package pathcomp

import (
	"fmt"
	"math"
	"time"
)

// Limits of a Measurement's fields (docs/pathcomp.md).
const (
	MaxNameLen = 63               // a node name is 1-63 of [A-Za-z0-9._-]
	MaxRTT     = 60 * time.Second // an RTT above a minute is a broken prober, not a path
)

// minAt and maxAt bound At to where Unix nanoseconds (int64, years
// 1678-2262) hold it with room to add intervals.
var (
	minAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Measurement is one prober report of one hop: From (an edge or a relay)
// to To (a relay, or an origin when ToOrigin is set), measured At.
// Available false means the prober could not reach To at all; RTT and
// Loss are then ignored.
type Measurement struct {
	From      string        `json:"from"`
	To        string        `json:"to"`
	ToOrigin  bool          `json:"to_origin,omitempty"`
	RTT       time.Duration `json:"rtt_ns"`
	Loss      float64       `json:"loss"`
	Available bool          `json:"available"`
	At        time.Time     `json:"at"`
}

// Validate checks every field of m, naming the field at fault.
func (m Measurement) Validate() error {
	if err := ValidateName(m.From); err != nil {
		return fmt.Errorf("measurement: from: %w", err)
	}
	if err := ValidateName(m.To); err != nil {
		return fmt.Errorf("measurement %s→%s: to: %w", m.From, m.To, err)
	}
	if m.From == m.To {
		return fmt.Errorf("measurement %s→%s: to: same node as from", m.From, m.To)
	}
	if m.RTT < 0 || m.RTT > MaxRTT {
		return fmt.Errorf("measurement %s→%s: rtt: %v outside 0..%v", m.From, m.To, m.RTT, MaxRTT)
	}
	if math.IsNaN(m.Loss) || m.Loss < 0 || m.Loss > 1 {
		return fmt.Errorf("measurement %s→%s: loss: %v outside 0..1", m.From, m.To, m.Loss)
	}
	if m.At.IsZero() {
		return fmt.Errorf("measurement %s→%s: at: missing", m.From, m.To)
	}
	if m.At.Before(minAt) || !m.At.Before(maxAt) {
		return fmt.Errorf("measurement %s→%s: at: %v outside %d-%d", m.From, m.To, m.At, minAt.Year(), maxAt.Year())
	}
	return nil
}

// ValidateName checks a node name: 1-63 characters of [A-Za-z0-9._-].
// The set is what a DNS label or a Redis key part carries without
// escaping.
func ValidateName(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("empty name")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("name %.20q… is %d characters, at most %d", s, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("name %q: character %q at %d not in [A-Za-z0-9._-]", s, c, i)
	}
	return nil
}
