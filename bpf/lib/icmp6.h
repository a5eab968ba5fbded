/* icmp6.h: ICMPv6 errors (RFC 4443) generated in XDP, time exceeded and
 * packet too big, sent back out of the interface (and VLAN) the packet
 * came in on within the IPv4 errors' per-kind budgets (icmp_allow). Shared
 * by the edge (the Internet -> IPv6 EIP and IPv6 VIP paths) and the agent
 * (an IPv6 guest's packet too big for the tunnel). The includer defines
 * first, as static __always_inline functions:
 *   struct icmp6_room *icmp6_room_get(void): this CPU's scratch for
 *     icmp6_error (the edge's edge_rooms.icmp6, the agent's
 *     agent_scratch6.icmp6), or NULL;
 *   const struct ip_addr *icmp6_src_get(const __u32 *zero): the errors'
 *     source (the edge's edge_config6.icmp_src, the agent's
 *     agent_config.icmp_src6), or NULL; :: sends none (zero is icmp6_error's
 *     key 0: one stack slot for both lookups, the edge's code as it was).
 */
#ifndef AZG_ICMP6_H
#define AZG_ICMP6_H

#include "icmp.h"


#define ICMP6_PKT_TOO_BIG_ 2
#define ICMP6_TIME_EXCEEDED_ 3
#define ICMP6_REDIRECT_ 137
#define IPV6_MIN_MTU_ 1280
/* RFC 4443 2.4(c): as much of the packet as fits the minimum MTU. */
#define ICMP6_QUOTE_MAX (IPV6_MIN_MTU_ - 40 - 8)
/* icmp6_error's answer when the error was sent: ICMP6_SENT | its counter. */
#define ICMP6_SENT 0x10000
/* icmp6_error's argument: the error's kind (ICMP_KIND_TTL: time exceeded;
 * ICMP_KIND_FRAG: packet too big) and packet too big's MTU. */
#define ICMP6_WHAT(kind, mtu) (((__u32)(kind) << 16) | (__u16)(mtu))
/* In icmp6_error's what: the edge answers expired hop limits
 * (edge_config's CFG_F_ICMP_TTL, which the caller holds). */
#define ICMP6_F_TTL_ON 0x1000000

/* RFC 4443 2.4(e): no error about an ICMPv6 error or redirect (nor about
 * a later fragment of ICMPv6, which may be one), a packet to a multicast
 * address or sent as link-layer multicast or broadcast, or from a source
 * that names no single node reachable off-link (unspecified, multicast,
 * link-local). */
static __always_inline int icmp6_may_answer(void *data, void *data_end, const struct pkt6 *p6)
{
	__u8 *eth = data;
	if ((void *)(eth + ETH_HLEN_) > data_end || (eth[0] & 1))
		return 0;
	if ((bpf_ntohl(p6->daddr.a[0]) >> 24) == 0xff)
		return 0;
	__u32 s0 = bpf_ntohl(p6->saddr.a[0]);
	if ((s0 >> 24) == 0xff || (s0 & 0xffc00000) == 0xfe800000)
		return 0;
	if (!(p6->saddr.a[0] | p6->saddr.a[1] | p6->saddr.a[2] | p6->saddr.a[3]))
		return 0;
	if (p6->p.proto == IPPROTO_ICMPV6_) {
		if (!p6->p.l4_ok)
			return 0;
		__u8 *t = data + OFF(p6->p.l4_off);
		if ((void *)(t + 1) > data_end)
			return 0;
		if (*t < 128 || *t == ICMP6_REDIRECT_)
			return 0;
	}
	return 1;
}

/* Answers the IPv6 packet p6 with an ICMPv6 error what (ICMP6_WHAT) in
 * place of the frame: time exceeded (type 3 code 0) or packet too big
 * (type 2, the MTU given), from the program's ICMPv6 source
 * (icmp6_src_get) to the
 * packet's source, back on the link (and VLAN tags) it came from, the
 * MACs swapped, quoting as much of the packet as fits 1280 bytes, the
 * checksum over RFC 8200's pseudo-header. Within the kind's budget
 * (icmp_allow, the IPv4 errors' budgets). Returns ICMP6_SENT | the sent
 * counter (icmp_ttl_tx, icmp_frag_tx; the caller counts and returns
 * XDP_TX), or the drop reason: drop_icmp_limit over budget, else the
 * packet's own (drop_ttl, drop_too_big): no ICMPv6 source configured,
 * not allowed (icmp6_may_answer), time exceeded off (CFG_F_ICMP_TTL), an
 * MTU below 1280 (an underlay that cannot carry IPv6's minimum: a packet
 * too big the sender may not act on, RFC 8200 5), a frame that could not
 * be rebuilt. A global function called by the edge's edge_ipv6, whose
 * frame and ipv6_frame's leave it 32 bytes, and by the agent's
 * agent_guest6: its state lives in the room (icmp6_room_get), and it
 * calls nothing with a stack of its own (the caller counts). */
__noinline int icmp6_error(struct xdp_md *ctx, const struct pkt6 *p6, __u32 what)
{
	if (!ctx || !p6)
		return STAT_DROP_TTL;
	/* The scratch entry first: what the rest needs is kept there (only
	 * ctx, rm and p6, until it is copied, cross the helpers). */
	__u32 zero = 0;
	struct icmp6_room *rm = icmp6_room_get();
	if (!rm)
		return STAT_DROP_TTL;
	rm->kind = (what >> 16) & 0xff;
	rm->mtu = rm->kind == ICMP_KIND_TTL ? 0 : what & 0xffff;
#define ICMP6_FAIL (rm->kind == ICMP_KIND_TTL ? STAT_DROP_TTL : STAT_DROP_TOO_BIG)
	if (rm->kind == ICMP_KIND_TTL ? !(what & ICMP6_F_TTL_ON) : rm->mtu < IPV6_MIN_MTU_)
		return ICMP6_FAIL;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (!icmp6_may_answer(data, data_end, p6))
		return ICMP6_FAIL;
	__u32 l3 = p6->p.l3_off;
	if (l3 != ETH_HLEN_ && l3 != ETH_HLEN_ + 4 && l3 != ETH_HLEN_ + 8)
		return ICMP6_FAIL;
	__u32 quote = p6->p.ip_len;
	if (quote > ICMP6_QUOTE_MAX)
		quote = ICMP6_QUOTE_MAX;
	if ((long)(data_end - data) < (long)(l3 + quote))
		return ICMP6_FAIL;
	__builtin_memcpy(&rm->dst, &p6->saddr, 16);
	rm->l3 = l3;
	rm->quote = quote;
	const struct ip_addr *src = icmp6_src_get(&zero);
	if (!src)
		return ICMP6_FAIL;
	__builtin_memcpy(&rm->src, src, 16);
	if (!(rm->src.a[0] | rm->src.a[1] | rm->src.a[2] | rm->src.a[3]))
		return ICMP6_FAIL;
	if (!icmp_allow(rm->kind))
		return STAT_DROP_ICMP_LIMIT;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	l3 = rm->l3 & 0x1f;
	quote = rm->quote & 0x7ff;
	int have = data_end - data;
	int want = l3 + quote;
	if (have > want && bpf_xdp_adjust_tail(ctx, want - have))
		return ICMP6_FAIL;
#define ICMP6_GROW (40 + 8)
	if (bpf_xdp_adjust_head(ctx, -(int)ICMP6_GROW))
		return ICMP6_FAIL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	l3 = rm->l3 & 0x1f;
	quote = rm->quote & 0x7ff;

	/* The link header, as icmp4_build keeps it: the old one is
	 * ICMP6_GROW bytes on (further than it is long), copied first. */
	__u8 *neth = data;
	__u8 *oeth = data + ICMP6_GROW;
	if ((void *)(oeth + ETH_HLEN_ + 8) > data_end)
		return ICMP6_FAIL;
	__builtin_memcpy(neth, oeth + ETH_ALEN_, ETH_ALEN_);
	__builtin_memcpy(neth + ETH_ALEN_, oeth, ETH_ALEN_);
	if (l3 == ETH_HLEN_) {
		*(__be16 *)(neth + 12) = bpf_htons(ETH_P_IPV6_);
	} else {
		__builtin_memcpy(neth + 12, oeth + 12, 4);
		if (l3 == ETH_HLEN_ + 4) {
			*(__be16 *)(neth + 16) = bpf_htons(ETH_P_IPV6_);
		} else {
			__builtin_memcpy(neth + 16, oeth + 16, 4);
			*(__be16 *)(neth + 20) = bpf_htons(ETH_P_IPV6_);
		}
	}
#undef ICMP6_GROW

	struct ipv6hdr *nip = data + l3;
	__u8 *nic = (void *)(nip + 1);
	if ((void *)(nic + 8) > data_end)
		return ICMP6_FAIL;
	*(__be32 *)nip = bpf_htonl(0x60000000); /* version 6, class 0, no flow label */
	nip->payload_len = bpf_htons(8 + quote);
	nip->nexthdr = IPPROTO_ICMPV6_;
	nip->hop_limit = ICMP_TTL;
	__builtin_memcpy(&nip->saddr, &rm->src, 16);
	__builtin_memcpy(&nip->daddr, &rm->dst, 16);
	nic[0] = rm->mtu ? ICMP6_PKT_TOO_BIG_ : ICMP6_TIME_EXCEEDED_;
	nic[1] = 0;
	*(__u16 *)(nic + 2) = 0;
	*(__be32 *)(nic + 4) = bpf_htonl(rm->mtu);

	/* The checksum: the pseudo-header (addresses, upper-layer length,
	 * next header), then the message in 4-byte words (at most 1,240
	 * bytes), then its last 1-3 bytes. Native loads summed: the ones'
	 * complement sum is the same in either byte order (RFC 1071). */
	__u64 sum = 0;
	for (int i = 0; i < 4; i++)
		sum += (__u64)rm->src.a[i] + rm->dst.a[i];
	__u32 n = 8 + quote;
	sum += (__u64)bpf_htonl(n) + bpf_htonl(IPPROTO_ICMPV6_);
	__u32 *w = (void *)nic;
	for (int i = 0; i < (8 + ICMP6_QUOTE_MAX) / 4; i++) {
		if ((__u32)i * 4 + 4 > n)
			break;
		__u32 *wi = w + i;
		barrier_var(wi);
		if ((void *)(wi + 1) > data_end)
			return ICMP6_FAIL;
		sum += *wi;
	}
	__u8 *tail = nic + (n & 0x7fc);
	if (n & 2) {
		if ((void *)(tail + 2) > data_end)
			return ICMP6_FAIL;
		sum += *(__u16 *)tail;
		tail += 2;
	}
	if (n & 1) {
		if ((void *)(tail + 1) > data_end)
			return ICMP6_FAIL;
		sum += *tail; /* the odd byte is the high-order byte in network order */
	}
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	*(__u16 *)(nic + 2) = ~csum_fold32((__u32)sum);
	return ICMP6_SENT | (rm->kind == ICMP_KIND_TTL ? STAT_ICMP_TTL_TX : STAT_ICMP_FRAG_TX);
#undef ICMP6_FAIL
}

#endif
