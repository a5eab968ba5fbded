/* icmp.h: ICMPv4 errors generated in XDP (time exceeded, fragmentation
 * needed) and sent back out of the interface (and VLAN) the packet came in
 * on, each kind within its own budget. */
#ifndef AZG_ICMP_H
#define AZG_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "csum.h"
#include "parse.h"
#include "stats.h"

#define ICMP_QUOTE_MAX (60 + 8)

enum icmp_gen_rc {
	ICMP_SENT = 0,
	ICMP_NOT_ALLOWED = 1, /* RFC 1812 4.3.2.7: no error about this packet */
	ICMP_LIMITED = 2,     /* rate limit */
	ICMP_FAILED = 3,      /* frame could not be rebuilt */
};

/* RFC 1812 4.3.2.7: never send an error about an ICMP error, a later
 * fragment, or a packet to a multicast/broadcast address. */
static __always_inline int icmp4_may_answer(void *data, void *data_end, const struct pkt *p)
{
	if (p->frag & IP_OFFMASK_)
		return 0;
	if ((bpf_ntohl(p->daddr) >> 24) >= 224)
		return 0;
	if (p->proto == IPPROTO_ICMP_) {
		struct icmphdr_ *ih = data + OFF(p->l4_off);
		if ((void *)(ih + 1) > data_end)
			return 0;
		if (ih->type != ICMP_ECHO_ && ih->type != ICMP_ECHOREPLY_ && ih->type != 13 &&
		    ih->type != 14)
			return 0;
	}
	return 1;
}

/* Rewrites the frame (an IPv4 packet p, untagged or with up to
 * MAX_VLAN_DEPTH VLAN tags, which the error keeps: it goes back on the
 * VLAN the packet came from) into an ICMP error to its source, from src,
 * quoting the original IP header and 8 bytes of payload (RFC 792). kind
 * (ICMP_KIND_*) picks the error's budget (icmp_allow). The caller returns
 * XDP_TX on ICMP_SENT. */
static __always_inline int icmp4_build(struct xdp_md *ctx, const struct pkt *p, __u8 type, __u8 code,
				       __u16 mtu, __be32 src)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	/* The link header: MACs, the tags (0, 4 or 8 bytes), the type. */
	__u32 l3 = p->l3_off;
	if (l3 != ETH_HLEN_ && l3 != ETH_HLEN_ + 4 && l3 != ETH_HLEN_ + 8)
		return ICMP_FAILED;

	__u32 quote = p->l4_off - p->l3_off + 8;
	if (quote > p->ip_len)
		quote = p->ip_len;
	if (quote > ICMP_QUOTE_MAX)
		return ICMP_FAILED;

	int have = data_end - data;
	int want = l3 + quote;
	if (have > want && bpf_xdp_adjust_tail(ctx, want - have))
		return ICMP_FAILED;
#define ICMP_GROW (sizeof(struct iphdr) + sizeof(struct icmphdr_))
	if (bpf_xdp_adjust_head(ctx, -(int)ICMP_GROW))
		return ICMP_FAILED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;

	/* The old link header is still there, ICMP_GROW bytes on (further
	 * than it is long: the copies do not overlap): its MACs swapped and
	 * its tags kept (copied from the packet, not the stack, which the
	 * callers' frames have all but used up). */
	__u8 *neth = data;
	__u8 *oeth = data + ICMP_GROW;
	if ((void *)(oeth + ETH_HLEN_ + 8) > data_end)
		return ICMP_FAILED;
	__builtin_memcpy(neth, oeth + ETH_ALEN_, ETH_ALEN_);
	__builtin_memcpy(neth + ETH_ALEN_, oeth, ETH_ALEN_);
	if (l3 == ETH_HLEN_) {
		*(__be16 *)(neth + 12) = bpf_htons(ETH_P_IP_);
	} else {
		__builtin_memcpy(neth + 12, oeth + 12, 4);
		if (l3 == ETH_HLEN_ + 4) {
			*(__be16 *)(neth + 16) = bpf_htons(ETH_P_IP_);
		} else {
			__builtin_memcpy(neth + 16, oeth + 16, 4);
			*(__be16 *)(neth + 20) = bpf_htons(ETH_P_IP_);
		}
	}
#undef ICMP_GROW

	struct iphdr *nip = data + OFF(l3);
	struct icmphdr_ *nic = (void *)(nip + 1);
	if ((void *)(nic + 1) > data_end)
		return ICMP_FAILED;

	nip->version = 4;
	nip->ihl = 5;
	nip->tos = 0xc0; /* internetwork control, as Linux sends its errors */
	nip->tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(struct icmphdr_) + quote);
	nip->id = 0;
	nip->frag_off = 0;
	nip->ttl = ICMP_TTL;
	nip->protocol = IPPROTO_ICMP_;
	nip->check = 0;
	nip->saddr = src;
	nip->daddr = p->saddr;
	nip->check = ipv4_csum20(nip);

	nic->type = type;
	nic->code = code;
	nic->checksum = 0;
	nic->un.gateway = 0;
	if (type == ICMP_DEST_UNREACH_ && code == ICMP_FRAG_NEEDED_)
		nic->un.frag.mtu = bpf_htons(mtu);

	/* Checksum over the ICMP header and the quote (at most 76 bytes). */
	__u32 sum = 0;
	__u32 len = sizeof(struct icmphdr_) + quote;
	__u16 *w = (void *)nic;
	for (int i = 0; i < (sizeof(struct icmphdr_) + ICMP_QUOTE_MAX) / 2; i++) {
		if ((__u32)i * 2 + 2 > len)
			break;
		__u16 *wi = w + i;
		barrier_var(wi);
		if ((void *)(wi + 1) > data_end)
			return ICMP_FAILED;
		sum += *wi;
	}
	if (len & 1) {
		__u8 *last = (void *)nic + (len & 0x7f) - 1;
		if ((void *)(last + 1) > data_end)
			return ICMP_FAILED;
		sum += *last; /* the odd byte is the high-order byte in network order */
	}
	nic->checksum = ~csum_fold32(sum);
	return ICMP_SENT;
}

/* The error icmp4_error sends, packed into one register (a global
 * function gets five): its kind (the budget), type, code and MTU. */
#define ICMP_WHAT(kind, type, code, mtu) \
	(((__u64)(kind) << 32) | ((__u64)(type) << 24) | ((__u64)(code) << 16) | (__u16)(mtu))

/* Whether an error of kind may be sent about p: allowed (RFC 1812) and
 * within the kind's budget; ICMP_SENT (0) if so. Global, as icmp4_rewrite
 * is: inlined at every caller, the two cost the edge program's
 * verification about 40k instructions more. */
__noinline int icmp4_admit(struct xdp_md *ctx, const struct pkt *p, __u32 kind)
{
	if (!ctx || !p)
		return ICMP_FAILED;
	if (!icmp4_may_answer((void *)(long)ctx->data, (void *)(long)ctx->data_end, p))
		return ICMP_NOT_ALLOWED;
	if (!icmp_allow(kind))
		return ICMP_LIMITED;
	return ICMP_SENT;
}

/* icmp4_build for icmp4_error, what packed as ICMP_WHAT. */
__noinline int icmp4_rewrite(struct xdp_md *ctx, const struct pkt *p, __u64 what, __be32 src)
{
	if (!ctx || !p)
		return ICMP_FAILED;
	return icmp4_build(ctx, p, (__u8)(what >> 24), (__u8)(what >> 16), (__u16)what, src);
}

/* Sends the error what (ICMP_WHAT) about p from src, in place of p (an
 * ICMP_SENT caller returns XDP_TX). Call it from the program's main
 * function: as a global function's callees, these two frames would not
 * fit the 512-byte stack of the deepest path (edge.c, icmp_send). */
static __always_inline int icmp4_error(struct xdp_md *ctx, const struct pkt *p, __u64 what, __be32 src)
{
	int rc = icmp4_admit(ctx, p, (__u32)(what >> 32));
	if (rc != ICMP_SENT)
		return rc;
	return icmp4_rewrite(ctx, p, what, src);
}


/* An ICMPv6 error (types 1-4, RFC 4443 2.1) of the IPv6 packet p6
 * describes: the offset of the packet it quotes (its IPv6 header, then
 * at least the four bytes of ports within the packet, not the frame's
 * padding), 0 when it is none (not an error, a later fragment, a quote
 * too short or past the parser's offsets). The agent's (agent_from_edge6,
 * agent_guest6) and the edge's (lb6_ingress: errors about an IPv6 VIP's
 * flow). */
static __always_inline __u32 icmp6_quote_off(void *data, void *data_end, const struct pkt6 *p6)
{
	if (p6->p.proto != IPPROTO_ICMPV6_ || !p6->p.l4_ok || p6->p.frag)
		return 0;
	__u32 qoff = p6->p.l4_off + 8;
	if (qoff + 44 > IPV6_L4_OFF_MAX || qoff + 44 > p6->p.l3_off + p6->p.ip_len)
		return 0;
	__u8 *ih = data + OFF(p6->p.l4_off);
	if ((void *)(ih + 1) > data_end || ih[0] == 0 || ih[0] > 4)
		return 0;
	__be16 *qp = data + OFF(qoff + 40);
	if ((void *)(qp + 2) > data_end)
		return 0;
	return qoff;
}

#ifdef AZG_PROG_EDGE
/* ---- ICMPv6 errors (RFC 4443), the edge's Internet -> IPv6 EIP path ---- */

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
 * (type 2, the MTU given), from edge_config6's ICMPv6 source to the
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
 * be rebuilt. A global function called by edge_ipv6, whose frame and
 * ipv6_frame's leave it 32 bytes: its state lives in edge_rooms.icmp6,
 * and it calls nothing with a stack of its own (the caller counts). */
__noinline int icmp6_error(struct xdp_md *ctx, const struct pkt6 *p6, __u32 what)
{
	if (!ctx || !p6)
		return STAT_DROP_TTL;
	/* The scratch entry first: what the rest needs is kept there (only
	 * ctx, rm and p6, until it is copied, cross the helpers). */
	__u32 zero = 0;
	struct icmp6_room *rm = EDGE_ROOM(icmp6);
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
	struct edge_config6 *c6 = bpf_map_lookup_elem(&edge_cfg6, &zero);
	if (!c6)
		return ICMP6_FAIL;
	__builtin_memcpy(&rm->src, &c6->icmp_src, 16);
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
#endif /* AZG_PROG_EDGE */

#endif
