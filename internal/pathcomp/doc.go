// Package pathcomp is the pure path-computation core of azgate's pathd
// (issue 11 part 4; docs/pathcomp.md): probers report RTT, loss and
// availability of hops (edge or relay → relay or origin); the core keeps
// smoothed figures per hop, computes for each (edge, origin) the cheapest
// path (direct, through one relay or through two), keeps the chosen path
// unless a clearly better one appears (hysteresis), and decides which
// reports a region applies and forwards to the other regions (dedup).
//
// The package has no clock, store or network: every call that needs the
// time takes it. Only the standard library is imported. Nothing here is
// safe for concurrent use: the service serialises calls (one goroutine, or
// a lock around the Store and Selector), and reads a Graph snapshot, which
// is immutable, from as many goroutines as it likes.
package pathcomp
