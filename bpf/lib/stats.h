/* stats.h: the per-reason counter array and the per-CPU ICMP token bucket,
 * defined once for every program that includes it. */
#ifndef AZG_STATS_H
#define AZG_STATS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "structs.h"
#include "maps.h"
#include "monitor.h"

static __always_inline void stat_add(__u32 idx, __u64 bytes)
{
	struct stat_entry *s = bpf_map_lookup_elem(&stats, &idx);
	if (s) {
		s->packets++;
		s->bytes += bytes;
	}
}

/* The verdicts, counted and shown to the monitor (lib/monitor.h): every
 * drop goes through count_drop (or mon_event directly where the caller
 * returns XDP_DROP itself, lib/fw.h), every pass through count_pass,
 * every frame sent through count_out. */
/* Every drop: a global (separately verified) function, one copy of the
 * counting and the monitor's hook instead of one inlined at each of the
 * hundred drop sites; the monitor's event is built in its frame (no
 * deeper call: lb_ingress's drops are at the bottom of the 512 bytes). */
__noinline int drop_counted(struct xdp_md *ctx, __u32 reason, __u32 bytes)
{
	stat_add(reason, bytes);
	if (mon_flags & MON_F_DROPS)
		mon_emit_body(ctx, reason, MON_K_DROP);
	return XDP_DROP;
}

static __always_inline int count_drop(struct xdp_md *ctx, __u32 reason, __u64 bytes)
{
	drop_counted(ctx, reason, bytes);
	return XDP_DROP;
}

static __always_inline int count_pass(struct xdp_md *ctx, __u32 reason, __u64 bytes)
{
	stat_add(reason, bytes);
	mon_event(ctx, reason, MON_K_PASS);
	return XDP_PASS;
}

/* A frame about to be sent (XDP_TX or a redirect), counted under stat. */
static __always_inline void count_out(struct xdp_md *ctx, __u32 stat, __u64 bytes)
{
	stat_add(stat, bytes);
	mon_event(ctx, stat, MON_K_OUT);
}

/* One token per error of a kind (ICMP_KIND_*) from that kind's bucket;
 * the kind's budget (icmp_kinds, written by the daemon): rate tokens per
 * second, burst tokens at most. An unwritten budget sends nothing. */
static __always_inline int icmp_allow(__u32 kind)
{
	const __u64 one = 1000000000ULL;

	if (kind >= ICMP_KIND_MAX)
		kind = ICMP_KIND_OTHER;
	struct icmp_kind_cfg *kc = bpf_map_lookup_elem(&icmp_kinds, &kind);
	if (!kc)
		return 0;
	__u32 rate = kc->rate, burst = kc->burst;
	if (!rate)
		return 0;
	struct icmp_bucket *b = bpf_map_lookup_elem(&icmp_budgets, &kind);
	if (!b)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 elapsed = now - b->last_ns;
	if (elapsed > 10 * one)
		elapsed = 10 * one;
	__u64 t = b->tokens + elapsed * rate;
	__u64 cap = (__u64)(burst ? burst : 1) * one;
	if (t > cap)
		t = cap;
	b->last_ns = now;
	if (t < one) {
		b->tokens = t;
		return 0;
	}
	b->tokens = t - one;
	return 1;
}

#endif
