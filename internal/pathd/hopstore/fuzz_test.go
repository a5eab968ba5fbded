package hopstore

import (
	"math"
	"testing"
)

// FuzzDecode: rows read back from a shared Redis are outside input. decode
// never panics; a row it accepts validates and re-encodes to a row that
// decodes to the same record.
func FuzzDecode(f *testing.F) {
	f.Add("e o", "1 1 5.25 0.01 1 1764763200000000000")
	f.Add("e r", "1 0 NaN 0 0 1764763200000000000")
	f.Add("a b", "1 0 1e400 0 1 1764763200000000000")
	f.Add(" ", "1 0 -0 0 1 0")
	f.Fuzz(func(t *testing.T, field, value string) {
		r, err := decode(field, value)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decode accepted %q %q: %v", field, value, err)
		}
		r2, err := decode(r.From+" "+r.To, encode(r))
		if err != nil {
			t.Fatalf("re-encoded row refused: %v", err)
		}
		same := r2.From == r.From && r2.To == r.To && r2.ToOrigin == r.ToOrigin && r2.Up == r.Up && r2.Last.Equal(r.Last) &&
			math.Float64bits(r2.Loss) == math.Float64bits(r.Loss) &&
			(math.Float64bits(r2.RTTms) == math.Float64bits(r.RTTms) || math.IsNaN(r.RTTms) && math.IsNaN(r2.RTTms))
		if !same {
			t.Fatalf("round trip %+v → %+v", r, r2)
		}
	})
}
