/* bw.h: per-EIP bandwidth limits (eip_bw; docs/dataplane.md, "Bandwidth
 * limits"), enforced by the edge on Internet -> EIP and by the agent on
 * guest -> Internet. The shared-bandwidth managers (issue 10) program the
 * rate and burst; this header only enforces them.
 *
 * Each limit is one byte-counting GCRA bucket (the virtual-scheduling form
 * of a token bucket, ITU-T I.371) in one 64-bit word, eip_bw_slots[i].tat
 * (i: the EIP's stats slot), shared by every CPU and updated with compare-and-swap: per-CPU buckets would
 * let N CPUs admit N times the rate when RSS spreads an EIP's flows.
 *
 * The clock is the kernel's tick (bw_now): jiffies times the tick's ns,
 * read inline (the verifier turns bpf_jiffies64 into one load, where the
 * bpf_ktime_get_ns it replaced was a helper call reading the clocksource:
 * ~35 ns per limited packet on the bench VM, BENCHMARKS.md). It stands
 * still within a tick (1-10 ms by HZ), so the bucket's tolerance is the
 * burst's worth plus one tick (bw_gcra): without it a bucket smaller than
 * a tick would refill once per tick and hold the EIP under its rate.
 *
 * Accuracy: a packet costs its IP length times the ns per byte, rounded
 * up (20 fraction bits: under 1 ns per packet), so over any interval t
 * the bucket admits at most burst + rate * (t + 2 ticks) bytes (a tick of
 * tolerance, and the clock's lag of up to a tick at either end of t) and,
 * flooded, at least rate * (t - 1 tick) less one packet: the long-run rate
 * is exact. The exception: after BW_CAS_TRIES lost compare-and-swaps in a
 * row (several CPUs charging the same EIP at the same instant) a packet is
 * admitted unchecked, its cost still added to the TAT (atomic add): at
 * most one packet per contending CPU beyond the bound, paid back by the
 * packets after it. An EIP without a limit costs one flag test
 * (ROUTE_F_BW in the edge's route cache slot, AGENT_F_BW in the agent's
 * guest entry). */
#ifndef AZG_BW_H
#define AZG_BW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"

#ifndef BW_CAS_TRIES
#define BW_CAS_TRIES 4
#endif

/* The buckets' clock, set by Go when it loads the program
 * (internal/dataplane/bwclock.go): bw_tick_ns, the kernel's tick in ns
 * (TICK_NSEC: the resolution of CLOCK_MONOTONIC_COARSE), and
 * bw_clock_base, jiffies * tick at CLOCK_MONOTONIC's zero, so that bw_now
 * is CLOCK_MONOTONIC to within a tick or two and a bucket's TAT means the
 * same to a program on bpf_ktime_get_ns (an earlier version, or this one
 * loaded without them: bw_tick_ns 0). Read-only data: the verifier knows
 * them and drops the branch not taken. */
volatile const __u64 bw_tick_ns = 0;
volatile const __u64 bw_clock_base = 0;

/* Now, on the buckets' clock (ns, monotonic, shared by every CPU). */
static __always_inline __u64 bw_now(void)
{
	if (!bw_tick_ns)
		return bpf_ktime_get_ns();
	return bpf_jiffies64() * bw_tick_ns - bw_clock_base;
}

/* Edge: the route cache flags of addr plus ROUTE_F_BW when it has a
 * bandwidth limit. Only when a slot is filled (every eip_bw write bumps
 * the route generation). */
static __always_inline __u8 bw_route_flags(__u8 flags, __be32 addr)
{
	if (bpf_map_lookup_elem(&eip_bw, &addr))
		flags |= ROUTE_F_BW;
	return flags;
}

/* Charge bytes to b at now: 1 if they conform (the TAT moves on by their
 * cost), 0 if they do not (nothing charged). The tolerance is the burst's
 * plus one tick: the clock jumps a tick at a time, and a saturated bucket
 * must have a tick's worth left to admit when it does. */
static __always_inline int bw_gcra(struct eip_bw_slot *b, __u64 now, __u64 cost)
{
	__u64 tau = b->tau + bw_tick_ns;
#pragma unroll
	for (int i = 0; i < BW_CAS_TRIES; i++) {
		__u64 old = *(volatile __u64 *)&b->tat;
		__u64 tat = (old > now ? old : now) + cost;
		if (tat - now > tau)
			return 0;
		if (__sync_val_compare_and_swap(&b->tat, old, tat) == old)
			return 1;
	}
	/* Lost every round: admit, but pay (see the accuracy note). */
	__sync_fetch_and_add(&b->tat, cost);
	return 1;
}

/* Whether bytes (an IP length) to or from eip, counted in stats slot idx,
 * are over its bandwidth limit: 1 drops the packet (counted in the slot;
 * the caller counts STAT_DROP_BW). The bucket is eip_bw_slots[idx], an
 * array lookup the verifier inlines (the hash lookup in eip_bw it replaced
 * cost 30-40 ns on the SRSO-mitigated bench VM). A slot holding another
 * EIP's bucket, or none (the limit removed since the flag was set, or not
 * yet copied): 0. Inlined: as a global function the call cost 10-20 ns
 * more per limited packet (BENCHMARKS.md, "Bandwidth limits"). */
static __always_inline int bw_over(__u32 idx, __be32 eip, __u32 bytes)
{
	struct eip_bw_slot *b = bpf_map_lookup_elem(&eip_bw_slots, &idx);
	if (!b || b->addr != eip)
		return 0;
	__u64 cost = ((__u64)(bytes & 0xffff) * b->ns_per_byte_q20 + ((1 << 20) - 1)) >> 20;
	if (bw_gcra(b, bw_now(), cost))
		return 0;
	__sync_fetch_and_add(&b->drop_packets, 1);
	__sync_fetch_and_add(&b->drop_bytes, bytes & 0xffff);
	return 1;
}

#if defined(AZG_PROG_EDGE) || defined(AZG_PROG_AGENT)
/* Charge bytes (an IP length) to an IPv6 EIP's bucket v: 1 if over its
 * limit (the drop counted in the bucket), 0 if they conform. */
static __always_inline int bw6_charge(struct eip_bw6 *v, __u32 bytes)
{
	__u64 cost = ((__u64)(bytes & 0xffff) * v->b.ns_per_byte_q20 + ((1 << 20) - 1)) >> 20;
	if (bw_gcra(&v->b, bw_now(), cost))
		return 0;
	__sync_fetch_and_add(&v->b.drop_packets, 1);
	__sync_fetch_and_add(&v->b.drop_bytes, bytes & 0xffff);
	return 1;
}
#endif

#ifdef AZG_PROG_EDGE
/* bw_over for an IPv6 EIP (edge, Internet -> IPv6 EIP), flagged
 * ROUTE_F_BW: the bucket is the EIP's eip_bw6 entry, found by the
 * destination (a hash lookup of 16 bytes where IPv4's slot is an array
 * index: IPv6 EIPs have no bucket slot yet). 1 drops the packet (counted
 * in the bucket; the caller counts drop_bw). Global: the IPv6 path has no
 * stack left. */
__noinline int bw6_over(const struct pkt6 *p6)
{
	if (!p6)
		return 0;
	struct eip_bw6 *v = bpf_map_lookup_elem(&eip_bw6, &p6->daddr);
	if (!v)
		return 0;
	return bw6_charge(v, p6->p.ip_len);
}
#endif

#ifdef AZG_PROG_AGENT
/* bw_over for an IPv6 EIP on the agent (guest -> Internet from eip), for
 * a guest flagged AGENT_F_BW: the bucket is the EIP's eip_bw6 entry (the
 * agent's own map, as the edge's: keyed by the EIP, no stats slot). 1
 * drops the packet (counted in the bucket; the caller counts drop_bw); no
 * entry (the limit removed since the flag was read): 0. Global, so the
 * IPv6 guest path's frame and the IPv4 paths stay as they were. */
__noinline int bw6_over_eip(const struct ip_addr *eip, __u32 bytes)
{
	if (!eip)
		return 0;
	struct eip_bw6 *v = bpf_map_lookup_elem(&eip_bw6, eip);
	if (!v)
		return 0;
	return bw6_charge(v, bytes);
}
#endif

#endif
