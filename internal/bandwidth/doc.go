// Package bandwidth is the shared-bandwidth hierarchy of issue 10: many
// EIPs, bound in different AZs, share one bandwidth package.
//
//	hosts (agents: egress, edges: ingress)      Host, host.go
//	  | per-EIP rates every interval, one report per node (bwstore, TTL 3 intervals)
//	  v                                    ^ per-node limits (bytes/s, burst), fenced by generation
//	zone manager, one active per zone      | (TTL = grace: their absence means no manager spoke)
//	  | the zone's rates summed per EIP    |
//	  v                                    ^ the zone's share of each EIP's limit
//	region manager, one active per region: demand estimates, weighted max-min
//	  fairness per package (internal/bwalloc), decreases pushed before increases
//
// A zone is one measurement store namespace (bwstore's "az"): agents use
// their host's AZ, edges --bw-zone. The contract between the tiers is
// docs/bandwidth.md; the allocation itself is internal/bwalloc, which the
// hosts also use for their static fallback: with no limits from a manager
// (before the first, or for longer than the grace period) a node enforces
// bwalloc.StaticSplit of the package, divided by the nodes carrying the
// EIP, so a packaged EIP is never unlimited and the package's total stays
// within its capacity without any manager.
package bandwidth
