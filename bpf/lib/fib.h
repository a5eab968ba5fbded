/* fib.h: next-hop resolution with bpf_fib_lookup, a per-CPU cache of its
 * results, and the final transmit.
 *
 * bpf_fib_lookup (FIB rules, LC-trie, neighbour table, MTU) costs about
 * 80-100 ns here, several times the rest of the encapsulation path. Its
 * result for a destination changes only when routes or neighbours do, so
 * it is cached in a direct-mapped per-CPU array (a slot per destination
 * hash; a colliding destination simply takes the slot over) and used until
 * the daemon bumps the config's nh_gen (it watches netlink for route,
 * neighbour and link changes) or for NH_CACHE_TTL_JIFFIES at most. A hit costs
 * an array lookup and a compare; a hash map (even LRU) cost four times
 * that.
 *
 * ECMP: a destination may have several next hops, and the kernel picks one
 * per flow by its multipath hash (of the addresses, or with
 * net.ipv4.fib_multipath_hash_policy=1 of the ports and protocol too). So
 * the cache is keyed by (destination, ingress interface, bucket), the
 * bucket being NH_BUCKETS-way bits of the flow hash, and a miss asks the
 * FIB with the flow's own fields (addresses, protocol, ports): each bucket
 * holds the next hop the kernel chose for a flow of it, and a
 * destination's flows spread over its next hops as its buckets do, at a
 * granularity of 1/NH_BUCKETS (resilient next-hop groups work the same
 * way). A cache keyed by destination alone pinned every flow of a
 * destination to the first next hop it saw. */
#ifndef AZG_FIB_H
#define AZG_FIB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "ports.h"
#include "structs.h"
#include "maps.h"


#ifdef AZG_PROG_EDGE
/* A bpf_fib_lookup request in this CPU's room (lib/maps.h edge_rooms),
 * off the stack. */
static __always_inline struct bpf_fib_lookup *fib_room(void)
{
	return (struct bpf_fib_lookup *)EDGE_ROOM(fib);
}
#endif

/* Buckets of a destination in the cache (a power of two). */
#ifndef NH_BUCKETS
#define NH_BUCKETS 16
#endif

/* The bucket of a flow, from any hash of it (the bits above the FlowID's
 * low nibble count too, for hashes that vary only there). */
static __always_inline __u32 nh_bucket(__u32 fh)
{
	return (fh ^ (fh >> 4) ^ (fh >> 12) ^ (fh >> 20) ^ (fh >> 28)) & (NH_BUCKETS - 1);
}

static __always_inline __u32 nh_slot(__be32 dst, __u32 ifindex, __u32 bucket)
{
	/* Fibonacci hashing: good enough to spread addresses over slots; a
	 * destination's buckets are consecutive slots. */
	return ((((dst ^ (ifindex << 16)) * HASH_MUL_GOLDEN) >> (32 - __builtin_ctz(NH_CACHE_SLOTS))) + bucket) &
	       (NH_CACHE_SLOTS - 1);
}

/* fib4_miss's (and so fib4f's) answer for a destination that names a
 * host (on the agent, an edge) of the IPv6 underlay (UL6_HOST, consts.h): no lookup is made, and
 * for any other caller it is a failed one (fib_reason: drop_fib). */
#define FIB_RET_UL6 0x100

/* The cache miss: asks the FIB for the request in fib (prepared by fib4c)
 * with the smallest length, so the answer holds the route MTU whatever
 * this packet's size, and stores a successful answer in the slot. A
 * global, separately verified function: inlined at every call site its
 * branches multiplied the verifier's states past its limit. */
__noinline int fib4_miss(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __u32 bucket)
{
	if (!ctx || !fib)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	__be32 dst = fib->ipv4_dst;
#if defined(AZG_PROG_EDGE) || defined(AZG_PROG_AGENT)
	/* A host (on the agent: an edge) of the IPv6 underlay, by its name:
	 * never cached, so a tunnel's path tests for it only when the lookup
	 * failed. */
	if (dst && UL6_HOST(dst))
		return FIB_RET_UL6;
#endif
	__u32 in = ctx->ingress_ifindex;
	fib->tot_len = 68;
	fib->ifindex = in;
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	bucket &= NH_BUCKETS - 1;
	__u32 slot = nh_slot(dst, in, bucket);
	struct nh_entry *e = bpf_map_lookup_elem(&nh_cache, &slot);
	if (e) {
		e->dst = dst;
		e->ifindex_in = in;
		e->bucket = bucket;
		__builtin_memcpy(e->smac, fib->smac, 6);
		__builtin_memcpy(e->dmac, fib->dmac, 6);
		e->ifindex = fib->ifindex;
		e->mtu = fib->mtu_result;
		e->gen = gen;
		e->expires = bpf_jiffies64() + NH_CACHE_TTL_JIFFIES;
	}
	return rc;
}

/* Looks the flow (src, dst, proto, ports: as on the wire) up in the kernel
 * FIB from the ingress interface's point of view (forwarding must be
 * enabled on it), through the cache, checking tot_len against the route
 * MTU. fh is any hash of the flow: it picks the cache bucket (see ECMP
 * above). Returns a BPF_FIB_LKUP_RET_* code; the result's MACs and egress
 * ifindex are set, and on FRAG_NEEDED fib->mtu_result holds the MTU. */
static __always_inline int fib4f(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __be32 src,
				 __be32 dst, __u16 tot_len, __u8 proto, __u8 tos, __be32 ports, __u32 fh)
{
	__u32 in = ctx->ingress_ifindex;
	__u32 bucket = nh_bucket(fh);
	__u32 slot = nh_slot(dst, in, bucket);
	struct nh_entry *e = bpf_map_lookup_elem(&nh_cache, &slot);
	__u32 mtu;

	if (e && e->dst == dst && e->ifindex_in == in && e->bucket == bucket && e->gen == gen &&
	    bpf_jiffies64() < e->expires) {
		__builtin_memcpy(fib->smac, e->smac, 6);
		__builtin_memcpy(fib->dmac, e->dmac, 6);
		fib->ifindex = e->ifindex;
		mtu = e->mtu;
	} else {
		__builtin_memset(fib, 0, sizeof(*fib));
		fib->family = AF_INET_;
		fib->tos = tos;
		fib->l4_protocol = proto;
		fib->ipv4_src = src;
		fib->ipv4_dst = dst;
		fib->sport = ports_sport(ports);
		fib->dport = ports_dport(ports);
		int rc = fib4_miss(ctx, fib, gen, bucket);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return rc;
		mtu = fib->mtu_result;
	}
	if (tot_len > mtu) {
		fib->mtu_result = mtu;
		return BPF_FIB_LKUP_RET_FRAG_NEEDED;
	}
	return BPF_FIB_LKUP_RET_SUCCESS;
}

/* fib4f for a flow without ports or hash: bucket 0, as a cache keyed by
 * destination alone (the agent's paths). */
static __always_inline int fib4c(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __be32 src,
				 __be32 dst, __u16 tot_len, __u8 proto, __u8 tos)
{
	return fib4f(ctx, fib, gen, src, dst, tot_len, proto, tos, 0, 0);
}

/* ---- IPv6 (nh_cache6): the same cache for IPv6 destinations ---- */

static __always_inline __u32 nh6_slot(const __be32 *dst, __u32 ifindex, __u32 bucket)
{
	/* The destination folded to a word, then nh_slot's hashing. */
	__u32 d = ip6w_xor(dst);
	return ((((d ^ (ifindex << 16)) * HASH_MUL_GOLDEN) >> (32 - __builtin_ctz(NH6_CACHE_SLOTS))) + bucket) &
	       (NH6_CACHE_SLOTS - 1);
}

/* fib4_miss for IPv6: asks the FIB for the request in fib (prepared by
 * fib6f) with the smallest IPv6 length (the answer holds the route MTU),
 * and stores a successful answer in the slot of (destination, ingress
 * interface, bucket). Inlined where a global function's frame does not fit
 * (the agent's agent_from_edge6, at the bottom of its stack); fib6_miss is
 * the separately verified copy. */
static __always_inline int fib6_fill(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __u32 bucket)
{
	__u32 in = ctx->ingress_ifindex;
	bucket &= NH_BUCKETS - 1;
	/* The slot is taken, and its destination written, before the lookup:
	 * the kernel writes the gateway's address over ipv6_dst. The slot
	 * stays unusable (expired) unless the lookup succeeds. */
	__u32 slot = nh6_slot(fib->ipv6_dst, in, bucket);
	struct nh_entry6 *e = bpf_map_lookup_elem(&nh_cache6, &slot);
	if (e) {
		__builtin_memcpy(&e->dst, fib->ipv6_dst, 16);
		e->expires = 0;
	}
	fib->tot_len = 40;
	fib->ifindex = in;
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	if (e) {
		e->ifindex_in = in;
		e->bucket = bucket;
		__builtin_memcpy(e->smac, fib->smac, 6);
		__builtin_memcpy(e->dmac, fib->dmac, 6);
		e->ifindex = fib->ifindex;
		e->mtu = fib->mtu_result;
		e->gen = gen;
		e->expires = bpf_jiffies64() + NH_CACHE_TTL_JIFFIES;
	}
	return rc;
}

#ifdef AZG_PROG_EDGE
__noinline int fib6_miss(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, __u32 bucket)
{
	if (!ctx || !fib)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	return fib6_fill(ctx, fib, gen, bucket);
}
#define FIB6_MISS fib6_miss
#else
#define FIB6_MISS fib6_fill
#endif

/* fib4f for IPv6: the flow (src, dst, proto, ports as on the wire,
 * flowinfo the header's traffic class and flow label word, as the kernel's
 * multipath hash reads it) looked up from the ingress interface (IPv6
 * forwarding must be enabled on it) through nh_cache6, tot_len checked
 * against the route MTU; fh, any hash of the flow, picks the bucket.
 * Returns a BPF_FIB_LKUP_RET_* code; the result's MACs and egress ifindex
 * are set (the egress ifindex with NO_NEIGH too), and on FRAG_NEEDED
 * fib->mtu_result holds the MTU. */
static __always_inline int fib6f(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u32 gen, const struct ip_addr *src,
				 const struct ip_addr *dst, __u16 tot_len, __u8 proto, __be32 flowinfo, __be32 ports,
				 __u32 fh)
{
	__u32 in = ctx->ingress_ifindex;
	__u32 bucket = nh_bucket(fh);
	__u32 slot = nh6_slot(dst->a, in, bucket);
	struct nh_entry6 *e = bpf_map_lookup_elem(&nh_cache6, &slot);
	__u32 mtu;

	if (e && ip6w_eq(&e->dst, dst) && e->ifindex_in == in && e->bucket == bucket && e->gen == gen &&
	    bpf_jiffies64() < e->expires) {
		__builtin_memcpy(fib->smac, e->smac, 6);
		__builtin_memcpy(fib->dmac, e->dmac, 6);
		fib->ifindex = e->ifindex;
		mtu = e->mtu;
	} else {
		__builtin_memset(fib, 0, sizeof(*fib));
		fib->family = AF_INET6_;
		fib->flowinfo = flowinfo;
		fib->l4_protocol = proto;
		__builtin_memcpy(fib->ipv6_src, src, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
		fib->sport = ports_sport(ports);
		fib->dport = ports_dport(ports);
		int rc = FIB6_MISS(ctx, fib, gen, bucket);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return rc;
		mtu = fib->mtu_result;
	}
	if (tot_len > mtu) {
		fib->mtu_result = mtu;
		return BPF_FIB_LKUP_RET_FRAG_NEEDED;
	}
	return BPF_FIB_LKUP_RET_SUCCESS;
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
