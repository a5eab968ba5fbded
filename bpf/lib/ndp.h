/* ndp.h: the edge's neighbor discovery for its IPv6 VIPs (RFC 4861), the
 * IPv6 twin of its ARP answering (edge.c arp_reply): on an interface of
 * arp_ifaces, while this edge owns its set's ARP scope (struct arp_owner:
 * one election and one deadline for both families), a neighbor
 * solicitation for an IPv6 VIP or an address of arp_addrs6 is answered
 * with a neighbor advertisement in place (XDP_TX). */
#ifndef AZG_NDP_H
#define AZG_NDP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "csum.h"
#include "stats.h"

#ifdef AZG_PROG_EDGE

/* The ones' complement sum of n bytes (at most NDP_NS_MAX) at p, as
 * native 4-byte words then the last 1-3 bytes (RFC 1071: the sum is the
 * same in either byte order, the odd byte the high-order one in network
 * order), added to sum; ~0 when the bytes are not all in the frame. */
static __always_inline __u64 ndp_sum(__u8 *p, __u32 n, void *data_end, __u64 sum)
{
	__u32 *w = (void *)p;
#pragma clang loop unroll(disable)
	for (int i = 0; i < NDP_NS_MAX / 4; i++) {
		if ((__u32)i * 4 + 4 > n)
			break;
		__u32 *wi = w + i;
		barrier_var(wi);
		if ((void *)(wi + 1) > data_end)
			return ~0ULL;
		sum += *wi;
	}
	__u8 *tail = p + (n & (NDP_NS_MAX - 4));
	if (n & 2) {
		if ((void *)(tail + 2) > data_end)
			return ~0ULL;
		sum += *(__u16 *)tail;
		tail += 2;
	}
	if (n & 1) {
		if ((void *)(tail + 1) > data_end)
			return ~0ULL;
		sum += *tail;
	}
	return sum;
}

static __always_inline __u16 ndp_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return csum_fold32((__u32)sum);
}

/* Answers an ICMPv6 neighbor solicitation (a valid IPv6 packet whose
 * ICMPv6 type is 135, to no IPv6 EIP or to an IPv6 VIP: edge.c
 * edge_ipv6's FRAME_NDP) arriving untagged, without extension headers, on
 * an ARP interface while this edge owns its ARP scope. Returns the XDP
 * action, counted. What it does not answer it passes to the kernel
 * (pass_ipv6), never to the load balancer:
 * on another interface, not the owner or past the deadline, a tagged
 * frame or one with extension headers, a valid solicitation for another
 * target or to a destination neither the target nor its solicited-node
 * group.
 *
 * The solicitation is validated as RFC 4861 7.1.1 says, each failure
 * dropped under its counter: hop limit 255 (drop_ndp_hop_limit), at least
 * 24 bytes (drop_ndp_short), a valid checksum (drop_ndp_csum), a target
 * that is not multicast (drop_ndp_target); code 0, at most NDP_NS_MAX
 * bytes, at most NDP_OPTS_MAX options, each of a length above 0 within
 * the message, and from
 * :: (duplicate address detection) no source link-layer address option
 * and a solicited-node destination (drop_ndp_bad).
 *
 * The advertisement (RFC 4861 4.4, 7.2.4) replaces the frame: from the
 * interface's MAC and the target address, hop limit 255, the Override
 * flag, Router for an arp_addrs6 address flagged so (a gateway), a target
 * link-layer address option with the interface's MAC. To the
 * solicitation's source (its Ethernet source), Solicited set; for a
 * solicitation from :: (another node's duplicate address detection for
 * our address, which it must see fail) to all-nodes ff02::1 (MAC
 * 33:33:00:00:00:01), Solicited clear, as 7.2.4 requires. Counted as
 * ndp_reply. Global: verified once, its stack its own (a few scalars and
 * the route key; the packet is rewritten where it lies). */
__noinline int ndp_answer(struct xdp_md *ctx)
{
	if (!ctx)
		return XDP_PASS;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 ifindex = ctx->ingress_ifindex;
	__u32 zero = 0;
	struct arp_iface *ai = bpf_map_lookup_elem(&arp_ifaces, &ifindex);
	if (!ai)
		goto pass;
	struct arp_owner *own = bpf_map_lookup_elem(&arp_owner, &zero);
	if (!own || bpf_ktime_get_ns() >= own->until_ns)
		goto pass;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + ETH_HLEN_;
	__u8 *ic = (void *)(ip6 + 1);
	if ((void *)(ic + 8) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6_) ||
	    ip6->nexthdr != IPPROTO_ICMPV6_ || ic[0] != ICMP6_NS_)
		goto pass;
	if (ip6->hop_limit != NDP_HOP_LIMIT)
		return count_drop(ctx, STAT_DROP_NDP_HOP_LIMIT, len);
	__u32 n = bpf_ntohs(ip6->payload_len);
	if (n < NDP_NS_LEN)
		return count_drop(ctx, STAT_DROP_NDP_SHORT, len);
	if (ic[1] != 0 || n > NDP_NS_MAX)
		return count_drop(ctx, STAT_DROP_NDP_BAD, len);
	/* The checksum over RFC 8200's pseudo-header and the message. */
	__u64 sum = (__u64)bpf_htonl(n) + bpf_htonl(IPPROTO_ICMPV6_);
	for (int i = 0; i < 4; i++)
		sum += (__u64)ip6->saddr.in6_u.u6_addr32[i] + ip6->daddr.in6_u.u6_addr32[i];
	sum = ndp_sum(ic, n, data_end, sum);
	if (sum == ~0ULL || ndp_fold(sum) != 0xffff)
		return count_drop(ctx, STAT_DROP_NDP_CSUM, len);
	if ((void *)(ic + NDP_NS_LEN) > data_end)
		return count_drop(ctx, STAT_DROP_NDP_SHORT, len);
	__be32 *tgt = (void *)(ic + 8);
	if ((bpf_ntohl(tgt[0]) >> 24) == 0xff)
		return count_drop(ctx, STAT_DROP_NDP_TARGET, len);
	__be32 *src = ip6->saddr.in6_u.u6_addr32;
	__be32 *dst = ip6->daddr.in6_u.u6_addr32;
	int dad = !(src[0] | src[1] | src[2] | src[3]);
	/* The options: each of a length above 0 (8-byte units) within the
	 * message; from ::, no source link-layer address. */
	__u32 off = NDP_NS_LEN;
#pragma clang loop unroll(disable)
	for (int i = 0; i <= NDP_OPTS_MAX; i++) {
		if (off >= n)
			break;
		if (i == NDP_OPTS_MAX)
			return count_drop(ctx, STAT_DROP_NDP_BAD, len);
		__u8 *o = ic + (off & (NDP_NS_MAX - 1));
		if ((void *)(o + 2) > data_end)
			return count_drop(ctx, STAT_DROP_NDP_BAD, len);
		__u32 olen = (__u32)o[1] * 8;
		if (!olen || off + olen > n || (dad && o[0] == NDP_OPT_SLLA))
			return count_drop(ctx, STAT_DROP_NDP_BAD, len);
		off += olen;
	}
	/* To the target itself (unicast: unreachability detection) or to
	 * its solicited-node group (ff02::1:ffXX:XXXX, RFC 4291 2.7.1). */
	int snm = dst[0] == bpf_htonl(0xff020000) && dst[1] == 0 && dst[2] == bpf_htonl(1) &&
		  (dst[3] & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000) &&
		  (dst[3] & bpf_htonl(0x00ffffff)) == (tgt[3] & bpf_htonl(0x00ffffff));
	if (dad && !snm)
		return count_drop(ctx, STAT_DROP_NDP_BAD, len);
	if (!snm && (dst[0] != tgt[0] || dst[1] != tgt[1] || dst[2] != tgt[2] || dst[3] != tgt[3]))
		goto pass;
	/* The target: an IPv6 VIP, or an address of arp_addrs6. */
	__u8 flags = NA_F_OVERRIDE | (dad ? 0 : NA_F_SOLICITED);
	struct eip_key k = {.family = AF_INET6_};
	__builtin_memcpy(&k.addr, tgt, 16);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if (!r || !(r->flags & ROUTE_F_VIP)) {
		__u32 *x = bpf_map_lookup_elem(&arp_addrs6, &k.addr);
		if (!x)
			goto pass;
		flags |= *x & NA_F_ROUTER;
	}

	/* The advertisement, in place: exactly Ethernet, IPv6 and its 32
	 * bytes (the solicitation may be shorter, without options, or
	 * longer). */
	int delta = (int)(ETH_HLEN_ + sizeof(struct ipv6hdr) + NDP_NA_LEN) - (int)(data_end - data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = data + ETH_HLEN_;
	ic = (void *)(ip6 + 1);
	if ((void *)(ic + NDP_NA_LEN) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	src = ip6->saddr.in6_u.u6_addr32;
	dst = ip6->daddr.in6_u.u6_addr32;
	if (dad) {
		dst[0] = bpf_htonl(0xff020000);
		dst[1] = 0;
		dst[2] = 0;
		dst[3] = bpf_htonl(1);
		eth->h_dest[0] = 0x33;
		eth->h_dest[1] = 0x33;
		eth->h_dest[2] = 0;
		eth->h_dest[3] = 0;
		eth->h_dest[4] = 0;
		eth->h_dest[5] = 1;
	} else {
		__builtin_memcpy(dst, src, 16);
		__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN_);
	}
	__builtin_memcpy(eth->h_source, ai->mac, ETH_ALEN_);
	__builtin_memcpy(src, &k.addr, 16);
	*(__be32 *)ip6 = bpf_htonl(0x60000000); /* version 6, class 0, no flow label */
	ip6->payload_len = bpf_htons(NDP_NA_LEN);
	ip6->hop_limit = NDP_HOP_LIMIT;
	ic[0] = ICMP6_NA_;
	ic[1] = 0;
	*(__u16 *)(ic + 2) = 0;
	*(__be32 *)(ic + 4) = 0;
	ic[4] = flags;
	/* The target stays where the solicitation had it (bytes 8-23). */
	ic[24] = NDP_OPT_TLLA;
	ic[25] = 1;
	__builtin_memcpy(ic + 26, ai->mac, ETH_ALEN_);
	sum = (__u64)bpf_htonl(NDP_NA_LEN) + bpf_htonl(IPPROTO_ICMPV6_);
	for (int i = 0; i < 4; i++)
		sum += (__u64)src[i] + dst[i];
	__u32 *w = (void *)ic;
	for (int i = 0; i < NDP_NA_LEN / 4; i++)
		sum += w[i];
	*(__u16 *)(ic + 2) = ~ndp_fold(sum);
	count_out(ctx, STAT_NDP_REPLY, len);
	return XDP_TX;
pass:
	return count_pass(ctx, STAT_PASS_IPV6, len);
}

#endif /* AZG_PROG_EDGE */

#endif
