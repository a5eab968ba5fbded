/* fib.h: next-hop resolution with bpf_fib_lookup, a per-CPU cache of its
 * results, and the final transmit.
 *
 * bpf_fib_lookup (FIB rules, LC-trie, neighbour table, MTU) costs about
 * 80-100 ns here, several times the rest of the encapsulation path. Its
 * results for a destination change only when routes or neighbours do, so
 * they are cached per CPU, keyed by destination and ingress interface, and
 * used until the daemon bumps the config's nh_gen (it watches netlink for
 * route, neighbour and link changes) or for NH_CACHE_TTL_NS at most. */
#ifndef AZG_FIB_H
#define AZG_FIB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, NH_CACHE_MAX);
	__type(key, struct nh_key);
	__type(value, struct nh_entry);
} nh_cache SEC(".maps");

/* Looks dst up in the kernel FIB from the ingress interface's point of view
 * (forwarding must be enabled on it), checking tot_len against the route
 * MTU. Returns a BPF_FIB_LKUP_RET_* code; on FRAG_NEEDED fib->mtu_result
 * holds the MTU. */
static __always_inline int fib4(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __be32 src,
				__be32 dst, __u16 tot_len, __u8 proto, __u8 tos)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET_;
	fib->tos = tos;
	fib->l4_protocol = proto;
	fib->tot_len = tot_len;
	fib->ifindex = ctx->ingress_ifindex;
	fib->ipv4_src = src;
	fib->ipv4_dst = dst;
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* fib4 through the cache, for a request prepared by fib4_req. Only
 * successful lookups are cached; a cached entry answers FRAG_NEEDED itself
 * when the request's length exceeds its MTU. The result's MACs, egress
 * ifindex and (on FRAG_NEEDED) mtu_result are set as by fib4. A global,
 * separately verified function: inlined at every call site its branches
 * multiplied the verifier's states past its limit. */
__noinline int fib4_cached(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen)
{
	if (!ctx || !fib)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	__u16 tot_len = fib->tot_len;
	struct nh_key k = {.dst = fib->ipv4_dst, .ifindex = ctx->ingress_ifindex};
	__u64 now = bpf_ktime_get_coarse_ns();
	struct nh_entry *e = bpf_map_lookup_elem(&nh_cache, &k);

	if (e && e->gen == gen && now < e->expires) {
		if (tot_len > e->mtu) {
			fib->mtu_result = e->mtu;
			return BPF_FIB_LKUP_RET_FRAG_NEEDED;
		}
		__builtin_memcpy(fib->smac, e->smac, 6);
		__builtin_memcpy(fib->dmac, e->dmac, 6);
		fib->ifindex = e->ifindex;
		return BPF_FIB_LKUP_RET_SUCCESS;
	}
	/* Ask with the smallest length so the answer holds the route MTU and
	 * is cacheable whatever this packet's size; then check the size. */
	fib->tot_len = 68;
	fib->ifindex = ctx->ingress_ifindex;
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	struct nh_entry n = {.ifindex = fib->ifindex, .mtu = fib->mtu_result, .gen = gen,
			     .expires = now + NH_CACHE_TTL_NS};
	__builtin_memcpy(n.smac, fib->smac, 6);
	__builtin_memcpy(n.dmac, fib->dmac, 6);
	bpf_map_update_elem(&nh_cache, &k, &n, BPF_ANY);
	if (tot_len > n.mtu) {
		fib->mtu_result = n.mtu;
		return BPF_FIB_LKUP_RET_FRAG_NEEDED;
	}
	return rc;
}

/* fib4_cached for a destination (arguments as fib4). */
static __always_inline int fib4c(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __be32 src,
				 __be32 dst, __u16 tot_len, __u8 proto, __u8 tos)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET_;
	fib->tos = tos;
	fib->l4_protocol = proto;
	fib->tot_len = tot_len;
	fib->ipv4_src = src;
	fib->ipv4_dst = dst;
	return fib4_cached(ctx, fib, gen);
}

/* Drop reason for a failed lookup that is neither FRAG_NEEDED nor NO_NEIGH. */
static __always_inline __u32 fib_reason(int rc)
{
	return rc == BPF_FIB_LKUP_RET_NO_NEIGH ? STAT_DROP_NO_NEIGH : STAT_DROP_FIB;
}

static __always_inline int xmit(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

#endif
