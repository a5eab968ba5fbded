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
/* The edge's ICMPv6 errors (lib/icmp6.h): kept in edge_rooms.icmp6, from
 * edge_config6's ICMPv6 source (the Internet -> IPv6 EIP paths). */
static __always_inline struct icmp6_room *icmp6_room_get(void)
{
	return EDGE_ROOM(icmp6);
}

static __always_inline const struct ip_addr *icmp6_src_get(const __u32 *zero)
{
	struct edge_config6 *c6 = bpf_map_lookup_elem(&edge_cfg6, zero);
	return c6 ? &c6->icmp_src : NULL;
}
#include "icmp6.h"
#endif /* AZG_PROG_EDGE */

#endif
