/* ratelimit.h: the edge's per-source packet-rate limit and per-destination
 * SYN guard, configured per EIP or VIP (edge_limits; docs/dataplane.md,
 * "Rate limits").
 *
 * Each limit is a GCRA bucket (struct rl_dst): one 64-bit theoretical
 * arrival time updated with compare-and-swap, so one bucket is shared by
 * every CPU and stays exact when RSS spreads a source's (or a
 * destination's) packets over several of them; per-CPU buckets would let
 * N CPUs admit N times the rate. A destination without limits costs the
 * fast path one flag test: the route cache slot (eip_centry) learns when
 * it is filled whether edge_limits has the destination. */
#ifndef AZG_RATELIMIT_H
#define AZG_RATELIMIT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"

/* The flags a route cache slot of addr gets: the route's, and which
 * limits addr has (ROUTE_F_RL_*). Only when a slot is filled (after every
 * route generation bump, which every edge_limits write makes). */
static __always_inline __u8 rl_route_flags(__u8 flags, __be32 addr)
{
	struct rl_dst *d = bpf_map_lookup_elem(&edge_limits, &addr);
	if (d) {
		if (d->src_ns)
			flags |= ROUTE_F_RL_SRC;
		if (d->syn_ns)
			flags |= ROUTE_F_RL_SYN;
	}
	return flags;
}

/* Whether p, to a destination whose route cache flags are flags, is
 * subject to a limit: any packet under a per-source limit, a SYN (without
 * ACK) under a SYN guard. What is not costs no call and no lookup. */
static __always_inline int rl_applies(__u8 flags, const struct pkt *p)
{
	if (flags & ROUTE_F_RL_SRC)
		return 1;
	return (flags & ROUTE_F_RL_SYN) && (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_ &&
	       p->proto == IPPROTO_TCP_;
}

/* GCRA (virtual scheduling): conforms while the TAT is at most tau ahead
 * of now; a conforming packet moves the TAT one interval on. Shared by
 * every CPU: a lost compare-and-swap means another CPU was charged
 * meanwhile, so the check is redone; after RL_CAS_TRIES lost rounds the
 * packet passes uncharged (a bounded error, under contention only). */
static __always_inline int rl_gcra(__u64 *tatp, __u64 now, __u64 interval, __u64 tau)
{
#pragma unroll
	for (int i = 0; i < RL_CAS_TRIES; i++) {
		__u64 old = *(volatile __u64 *)tatp;
		__u64 tat = old > now ? old : now;
		if (tat - now > tau)
			return 0;
		if (__sync_val_compare_and_swap(tatp, old, tat + interval) == old)
			return 1;
	}
	return 1;
}

/* The rate limits of the packet's destination (an EIP or VIP flagged
 * ROUTE_F_LIMITS), from the Internet side: the counter the packet is
 * dropped under, or 0. The per-source limit first, so a source over its
 * own rate spends none of the destination's SYN budget. Global (verified
 * once, on its own). */
__noinline __u32 rl_check(const struct pkt *p)
{
	if (!p)
		return 0;
	__be32 dst = p->daddr;
	struct rl_dst *d = bpf_map_lookup_elem(&edge_limits, &dst);
	if (!d)
		return 0;
	__u64 now = 0;
	if (d->src_ns) {
		now = bpf_ktime_get_ns();
		struct rl_src_key k = {.src = p->saddr, .dst = dst};
		__u64 *tat = bpf_map_lookup_elem(&edge_rl_src, &k);
		if (!tat) {
			/* A new pair: this packet is its first charge. If
			 * another CPU created it meanwhile, this one goes
			 * uncharged (one packet per CPU at most). */
			__u64 v = now + d->src_ns;
			bpf_map_update_elem(&edge_rl_src, &k, &v, BPF_NOEXIST);
		} else if (!rl_gcra(tat, now, d->src_ns, d->src_tau)) {
			__sync_fetch_and_add(&d->drop_src, 1);
			return STAT_DROP_RL_SOURCE;
		}
	}
	/* A SYN without ACK: a connection attempt. */
	if (d->syn_ns && p->proto == IPPROTO_TCP_ && p->l4_ok && (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_) {
		if (!now)
			now = bpf_ktime_get_ns();
		if (!rl_gcra(&d->syn_tat, now, d->syn_ns, d->syn_tau)) {
			__sync_fetch_and_add(&d->drop_syn, 1);
			return STAT_DROP_RL_SYN;
		}
	}
	return 0;
}

/* ---- IPv6 EIPs: the same limits in edge_limits6, per-source buckets in
 * edge_rl_src6 keyed by the source's /64 (one host, or one attacker,
 * holds a whole /64: keyed by the address, it would have 2^64 buckets
 * and no limit at all). */

/* rl_route_flags for an IPv6 EIP. */
static __always_inline __u8 rl_route_flags6(__u8 flags, const struct ip_addr *addr)
{
	struct rl_dst *d = bpf_map_lookup_elem(&edge_limits6, addr);
	if (d) {
		if (d->src_ns)
			flags |= ROUTE_F_RL_SRC;
		if (d->syn_ns)
			flags |= ROUTE_F_RL_SYN;
	}
	return flags;
}

/* rl_check for an IPv6 packet to an IPv6 EIP flagged ROUTE_F_LIMITS.
 * Global (verified once, on its own). */
__noinline __u32 rl6_check(const struct pkt6 *p6)
{
	if (!p6)
		return 0;
	const struct pkt *p = &p6->p;
	struct rl_dst *d = bpf_map_lookup_elem(&edge_limits6, &p6->daddr);
	if (!d)
		return 0;
	__u64 now = 0;
	if (d->src_ns) {
		/* The keys in per-CPU memory: the caller's stack is full. */
		struct rl6_scratch *x = EDGE_ROOM(rl6);
		if (!x)
			return 0;
		now = bpf_ktime_get_ns();
		x->k.src64[0] = p6->saddr.a[0];
		x->k.src64[1] = p6->saddr.a[1];
		__builtin_memcpy(&x->k.dst, &p6->daddr, sizeof(x->k.dst));
		__u64 *tat = bpf_map_lookup_elem(&edge_rl_src6, &x->k);
		if (!tat) {
			x->v = now + d->src_ns;
			bpf_map_update_elem(&edge_rl_src6, &x->k, &x->v, BPF_NOEXIST);
		} else if (!rl_gcra(tat, now, d->src_ns, d->src_tau)) {
			__sync_fetch_and_add(&d->drop_src, 1);
			return STAT_DROP_RL_SOURCE;
		}
	}
	if (d->syn_ns && p->proto == IPPROTO_TCP_ && p->l4_ok && (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_) {
		if (!now)
			now = bpf_ktime_get_ns();
		if (!rl_gcra(&d->syn_tat, now, d->syn_ns, d->syn_tau)) {
			__sync_fetch_and_add(&d->drop_syn, 1);
			return STAT_DROP_RL_SYN;
		}
	}
	return 0;
}

#endif
