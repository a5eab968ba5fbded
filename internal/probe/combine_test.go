package probe

import (
	"maps"
	"testing"
	"time"
)

func TestCombine(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	fresh, stale := now.Add(-time.Second), now.Add(-time.Minute)
	v := func(vantage string, at time.Time, up map[string]bool) View {
		return View{Vantage: vantage, At: at, Up: up}
	}
	const maxAge = 10 * time.Second
	for _, tc := range []struct {
		name   string
		views  []View
		quorum int
		want   map[string]bool
	}{
		{"no views", nil, 0, map[string]bool{}},
		{"one view down", []View{v("a", fresh, map[string]bool{"x": false, "y": true})}, 0,
			map[string]bool{"x": false, "y": true}},
		{"majority of three", []View{
			v("a", fresh, map[string]bool{"x": false, "y": false}),
			v("b", fresh, map[string]bool{"x": false, "y": true}),
			v("c", fresh, map[string]bool{"x": true, "y": true}),
		}, 0, map[string]bool{"x": false, "y": true}},
		{"two of four is no majority", []View{
			v("a", fresh, map[string]bool{"x": false}),
			v("b", fresh, map[string]bool{"x": false}),
			v("c", fresh, map[string]bool{"x": true}),
			v("d", fresh, map[string]bool{"x": true}),
		}, 0, map[string]bool{"x": true}},
		{"explicit quorum 1", []View{
			v("a", fresh, map[string]bool{"x": false}),
			v("b", fresh, map[string]bool{"x": true}),
			v("c", fresh, map[string]bool{"x": true}),
		}, 1, map[string]bool{"x": false}},
		{"quorum above the views", []View{
			v("a", fresh, map[string]bool{"x": false}),
		}, 2, map[string]bool{"x": true}},
		{"stale views do not vote", []View{
			v("a", stale, map[string]bool{"x": false}),
			v("b", stale, map[string]bool{"x": false}),
			v("c", fresh, map[string]bool{"x": true}),
		}, 0, map[string]bool{"x": true}},
		{"no fresh view: up", []View{
			v("a", stale, map[string]bool{"x": false}),
		}, 0, map[string]bool{"x": true}},
		{"future beyond maxAge is stale", []View{
			v("a", now.Add(time.Minute), map[string]bool{"x": false}),
		}, 0, map[string]bool{"x": true}},
		{"exactly maxAge is fresh", []View{
			v("a", now.Add(-maxAge), map[string]bool{"x": false}),
		}, 0, map[string]bool{"x": false}},
		{"newest view of a vantage counts", []View{
			v("a", fresh, map[string]bool{"x": true}),
			v("a", fresh.Add(-time.Second), map[string]bool{"x": false}),
			v("b", fresh, map[string]bool{"x": true}),
		}, 1, map[string]bool{"x": true}},
		{"majority among views reporting the key", []View{
			v("a", fresh, map[string]bool{"x": false, "only-a": false}),
			v("b", fresh, map[string]bool{"x": true}),
			v("c", fresh, map[string]bool{"x": true}),
		}, 0, map[string]bool{"x": true, "only-a": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := make([]View, len(tc.views))
			copy(in, tc.views)
			got := Combine(tc.views, now, maxAge, tc.quorum)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("Combine: %v, want %v", got, tc.want)
			}
			// Pure: the same answer twice, the input untouched.
			if again := Combine(tc.views, now, maxAge, tc.quorum); !maps.Equal(again, got) {
				t.Fatalf("Combine not deterministic: %v then %v", got, again)
			}
			for i := range in {
				if in[i].Vantage != tc.views[i].Vantage || !in[i].At.Equal(tc.views[i].At) || !maps.Equal(in[i].Up, tc.views[i].Up) {
					t.Fatalf("Combine changed its input")
				}
			}
		})
	}
}
