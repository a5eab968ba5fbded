// Package bwalloc is the pure allocation core of azgate's shared bandwidth
// (issue 10 part 4; docs/bandwidth.md): how the region manager turns
// measured per-EIP rates into per-host limits for the EIPs of a bandwidth
// package.
//
// One round of the region manager is:
//
//  1. Estimator.Observe every report that arrived, then Estimator.Demand
//     for every EIP of every package: recent peak × 1.1, probing upward
//     when an EIP is pinned at its limit; a missing report keeps the last
//     estimate for a grace period (flagged stale), it is never read as 0.
//  2. Allocator.Package per package: weighted max-min fairness
//     (water-filling) honouring each EIP's min, max and weight; total ≤
//     capacity; spare capacity handed out as headroom by weight.
//  3. SplitHosts per EIP: its limit over the hosts (or edges) that carry
//     it, in proportion to their demand with a floor; the shares sum
//     exactly to the EIP's limit.
//  4. PlanPushes: the changes against what is in force, decreases first.
//
// StaticSplit is the fallback agents use when no manager is heard from
// (issue 10 part 6): capacity × weight share, honouring min and max.
//
// The package has no clock, store or network: time is passed in, every
// function is deterministic (inputs are ordered by address, then host
// name) and only the standard library is imported. Rates are bits per
// second as uint64 throughout, so sums are exact.
package bwalloc
