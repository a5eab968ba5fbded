/* monitor.h: drop and trace events for `azgate monitor` and `azgate
 * capture` (internal/monitor). Every verdict goes through stats.h's
 * count_drop / count_pass / count_out, which call mon_event here, so no
 * drop site is missed: a drop counted is a drop the monitor can show.
 *
 * Off (mon_flags 0, the default) costs one load of a global (.bss) per
 * verdict and nothing else: no map lookup, no stack. On, an event goes
 * through mon_emit_body (in drop_counted for a drop, in the global
 * function mon_emit for the trace): it takes a token from this CPU's
 * bucket (mon_state, on the coarse clock; mon_rate events a second,
 * mon_burst at most), reserves a fixed-size record (struct mon_event) in
 * the pinned ring buffer mon_events and copies the first MON_SNAP bytes of
 * the frame into it. The 5-tuple is parsed from those bytes by the reader
 * (every header it needs is within them), so the program parses nothing
 * twice. Events refused by the bucket or by a full ring are counted per
 * CPU (mon_state) and shown by the reader.
 *
 * The record is built in ring memory, not on the stack (bpf_ringbuf_reserve
 * rather than bpf_ringbuf_output): the drop sites inside lb_ingress have no
 * stack to spare, and mon_emit's own frame stays within the 32 bytes the
 * verifier counts below it. */
#ifndef AZG_MONITOR_H
#define AZG_MONITOR_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"

/* Set by the node daemon (internal/dataplane SetMonitor) through the
 * loaded object: MON_F_DROPS, MON_F_TRACE. Globals, so the test on every
 * verdict needs no key on the stack. */
volatile __u32 mon_flags;
volatile __u32 mon_rate;  /* events a second, per CPU */
volatile __u32 mon_burst; /* events at most in one go, per CPU */

/* Its maps (mon_events, mon_state) are in maps.h. */

/* One event of kind (MON_K_*) for the frame in ctx under reason (enum
 * azg_stat; 0 for MON_K_IN). Inlined in two global functions only:
 * mon_emit here and drop_counted (stats.h), whose frame it shares so that
 * a drop below lb_ingress is one call deep, not two. */
static __always_inline int mon_emit_body(struct xdp_md *ctx, __u32 reason, __u32 kind)
{
	const __u64 one = 1000000000ULL;
	__u32 k = 0;

	if (!ctx)
		return 0;
	struct mon_state *s = bpf_map_lookup_elem(&mon_state, &k);
	if (!s)
		return 0;
	if (kind == MON_K_IN)
		s->seq++;
	/* The bucket runs on the coarse clock (a tick's resolution, read
	 * without touching the clock source): under a flood of drops every
	 * refused event reads it, and bpf_ktime_get_ns costs tens of ns in
	 * a VM. The event's own time is the precise clock. */
	__u64 now = bpf_ktime_get_coarse_ns();
	__u64 elapsed = now - s->last_ns;
	if (elapsed > 10 * one)
		elapsed = 10 * one;
	__u64 rate = mon_rate, burst = mon_burst;
	__u64 t = s->tokens + elapsed * rate;
	__u64 cap = (burst ? burst : 1) * one;
	if (t > cap)
		t = cap;
	s->last_ns = now;
	if (t < one) {
		s->tokens = t;
		s->lost_rate++;
		return 0;
	}
	s->tokens = t - one;

	struct mon_event *ev = bpf_ringbuf_reserve(&mon_events, sizeof(*ev), 0);
	if (!ev) {
		s->lost_full++;
		return 0;
	}
	__u32 len = ctx->data_end - ctx->data;
	ev->ts = bpf_ktime_get_ns();
	ev->seq = s->seq;
	ev->reason = reason;
	ev->kind = kind;
	ev->ifindex = ctx->ingress_ifindex;
	ev->cpu = bpf_get_smp_processor_id();
	ev->len = len;
	__u64 n = len < MON_SNAP ? len : MON_SNAP;
	/* Opaque to clang, so the bounds below are checked on the register
	 * the helper gets (not on a copy of len). */
	asm volatile("" : "+r"(n));
	ev->snap = 0;
	if (n > 0 && n <= MON_SNAP && bpf_xdp_load_bytes(ctx, 0, ev->data, n) == 0)
		ev->snap = n;
	s->sent++;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

__noinline int mon_emit(struct xdp_md *ctx, __u32 reason, __u32 kind)
{
	return mon_emit_body(ctx, reason, kind);
}

/* The monitor's hook on every verdict: one global read when off. */
static __always_inline void mon_event(struct xdp_md *ctx, __u32 reason, __u32 kind)
{
	__u32 f = mon_flags;
	if (kind == MON_K_DROP ? (f & MON_F_DROPS) : (f & MON_F_TRACE))
		mon_emit(ctx, reason, kind);
}

#endif
