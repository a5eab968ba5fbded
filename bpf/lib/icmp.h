/* icmp.h: ICMPv4 errors generated in XDP (time exceeded, fragmentation
 * needed) and sent back out of the interface the packet came in on. */
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
	if (p->l3_off != ETH_HLEN_)
		return 0; /* VLAN-tagged: we only answer on untagged links */
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

/* Rewrites the frame (an untagged IPv4 packet p) into an ICMP error to its
 * source, from src, quoting the original IP header and 8 bytes of payload
 * (RFC 792). The caller returns XDP_TX on ICMP_SENT. */
static __always_inline int icmp4_error(struct xdp_md *ctx, const struct pkt *p, __u8 type, __u8 code,
				       __u16 mtu, __be32 src, __u32 rate, __u32 burst)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (!icmp4_may_answer(data, data_end, p))
		return ICMP_NOT_ALLOWED;
	if (!icmp_allow(rate, burst))
		return ICMP_LIMITED;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return ICMP_FAILED;
	__u8 dmac[ETH_ALEN_], smac[ETH_ALEN_];
	__builtin_memcpy(dmac, eth->h_source, ETH_ALEN_);
	__builtin_memcpy(smac, eth->h_dest, ETH_ALEN_);

	__u32 quote = p->l4_off - p->l3_off + 8;
	if (quote > p->ip_len)
		quote = p->ip_len;
	if (quote > ICMP_QUOTE_MAX)
		return ICMP_FAILED;

	int have = data_end - data;
	int want = ETH_HLEN_ + quote;
	if (have > want && bpf_xdp_adjust_tail(ctx, want - have))
		return ICMP_FAILED;
	if (bpf_xdp_adjust_head(ctx, -(int)(sizeof(struct iphdr) + sizeof(struct icmphdr_))))
		return ICMP_FAILED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;

	struct ethhdr *neth = data;
	struct iphdr *nip = data + ETH_HLEN_;
	struct icmphdr_ *nic = data + ETH_HLEN_ + sizeof(struct iphdr);
	if ((void *)(nic + 1) > data_end)
		return ICMP_FAILED;

	__builtin_memcpy(neth->h_dest, dmac, ETH_ALEN_);
	__builtin_memcpy(neth->h_source, smac, ETH_ALEN_);
	neth->h_proto = bpf_htons(ETH_P_IP_);

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

#endif
