package probe

import "time"

// View is one vantage point's report: the Up of each target it checks.
type View struct {
	Vantage string
	At      time.Time
	Up      map[string]bool // by target Key
}

// Combine merges several vantage points' views into one up/down per
// target. A target is down when at least quorum of the fresh views that
// report it say down; quorum 0 (or less) means a majority of those views.
// A view is fresh when its At is within maxAge of now (either side: a
// clock ahead by more than maxAge is not trusted); of several views from
// one Vantage only the newest counts. A target that no fresh view reports
// is up, as is every target when no view is fresh: losing the probers
// must not take a service out of DNS. Every key of every view (fresh or
// not) is in the result. Pure: no clock, no state.
func Combine(views []View, now time.Time, maxAge time.Duration, quorum int) map[string]bool {
	newest := map[string]int{}
	for i, v := range views {
		if j, ok := newest[v.Vantage]; !ok || v.At.After(views[j].At) {
			newest[v.Vantage] = i
		}
	}
	out := map[string]bool{}
	reports := map[string]int{}
	downs := map[string]int{}
	for i, v := range views {
		for k := range v.Up {
			out[k] = true
		}
		if newest[v.Vantage] != i {
			continue
		}
		age := now.Sub(v.At)
		if age > maxAge || age < -maxAge {
			continue
		}
		for k, up := range v.Up {
			reports[k]++
			if !up {
				downs[k]++
			}
		}
	}
	for k, n := range reports {
		q := quorum
		if q <= 0 {
			q = n/2 + 1
		}
		if downs[k] >= q {
			out[k] = false
		}
	}
	return out
}
