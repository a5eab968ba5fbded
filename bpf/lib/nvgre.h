/* nvgre.h: NVGRE (RFC 7637) encapsulation and decapsulation of IPv4 frames.
 *
 * On the wire: outer Ethernet | outer IPv4 (protocol 47) | GRE, K bit set,
 * protocol 0x6558, key = VSID << 8 | FlowID | inner Ethernet | inner IPv4. */
#ifndef AZG_NVGRE_H
#define AZG_NVGRE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "csum.h"
#include "parse.h"

struct gre_key_hdr {
	__be16 flags; /* C R K S, reserved0, version: only K may be set */
	__be16 proto; /* 0x6558 */
	__be32 key;   /* VSID << 8 | FlowID */
};

/* Addresses and fields of the headers nvgre_push writes. The MACs are
 * read while the headers are written: never the frame's own (the push
 * moves them). */
struct nvgre_spec {
	const __u8 *odst; /* outer Ethernet */
	const __u8 *osrc;
	const __u8 *idst; /* inner Ethernet */
	const __u8 *isrc;
	__be32 saddr; /* outer IPv4 */
	__be32 daddr;
	__u32 key;    /* host order: VSID << 8 | FlowID */
	__u8 tos;
};

/* Makes room for a header stack of stack bytes in front of the packet at
 * l3_off (ip_len bytes), dropping Ethernet padding behind the packet:
 * nvgre_push's and nvgre6_push's resize. Returns 0 with ctx->data ..
 * ctx->data + stack writable, or -1 when the frame cannot be resized. */
static __always_inline int nvgre_room(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len, int stack)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int have = data_end - data;
	int want = (int)l3_off + ip_len;

	if (have > want && bpf_xdp_adjust_tail(ctx, want - have))
		return -1;
	if (bpf_xdp_adjust_head(ctx, (int)l3_off - stack))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + stack > data_end)
		return -1;
	return 0;
}

/* Replaces everything in front of the IPv4 packet at l3_off (ip_len bytes)
 * with a full NVGRE header stack, dropping Ethernet padding behind the
 * packet. Returns 0, or -1 when the frame cannot be resized. */
static __always_inline int nvgre_push_at(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len,
					 const struct nvgre_spec *s, int words)
{
	if (nvgre_room(ctx, l3_off, ip_len, NVGRE_STACK_LEN))
		return -1;
	void *data = (void *)(long)ctx->data;

	struct ethhdr *oeth = data;
	struct iphdr *oip = data + ETH_HLEN_;
	struct gre_key_hdr *gre = data + ETH_HLEN_ + sizeof(struct iphdr);
	struct ethhdr *ieth = data + ETH_HLEN_ + sizeof(struct iphdr) + GRE_HLEN_KEY;

	if (words) {
		mac_copy(oeth->h_dest, s->odst);
		mac_copy(oeth->h_source, s->osrc);
	} else {
		__builtin_memcpy(oeth->h_dest, s->odst, ETH_ALEN_);
		__builtin_memcpy(oeth->h_source, s->osrc, ETH_ALEN_);
	}
	oeth->h_proto = bpf_htons(ETH_P_IP_);

	oip->version = 4;
	oip->ihl = 5;
	oip->tos = s->tos;
	oip->tot_len = bpf_htons(ip_len + NVGRE_OVERHEAD);
	oip->id = 0;
	oip->frag_off = bpf_htons(IP_DF_);
	oip->ttl = OUTER_TTL;
	oip->protocol = IPPROTO_GRE_;
	oip->check = 0;
	oip->saddr = s->saddr;
	oip->daddr = s->daddr;
	oip->check = ipv4_csum20(oip);

	gre->flags = bpf_htons(GRE_FLAG_K);
	gre->proto = bpf_htons(GRE_PROTO_TEB);
	gre->key = bpf_htonl(s->key);

	if (words) {
		mac_copy(ieth->h_dest, s->idst);
		mac_copy(ieth->h_source, s->isrc);
	} else {
		__builtin_memcpy(ieth->h_dest, s->idst, ETH_ALEN_);
		__builtin_memcpy(ieth->h_source, s->isrc, ETH_ALEN_);
	}
	ieth->h_proto = bpf_htons(ETH_P_IP_);
	return 0;
}

static __always_inline int nvgre_push(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len,
				      const struct nvgre_spec *s)
{
	return nvgre_push_at(ctx, l3_off, ip_len, s, 0);
}

/* nvgre_push over an IPv6 underlay: the outer header is IPv6 (next
 * header GRE, hop limit OUTER_TTL, traffic class tos, flow label label:
 * the underlay's routers spread a host's tunnels by it, RFC 6438), from
 * *saddr to *daddr, in front of the packet at l3_off (ip_len bytes, IPv4
 * or IPv6: the inner ethertype is eproto, network order). Returns 0, or
 * -1 when the frame cannot be resized. */
static __always_inline int nvgre6_push(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len, const __u8 *odst,
				       const __u8 *osrc, const struct ip_addr *saddr, const struct ip_addr *daddr,
				       __u32 key, __u8 tos, __u32 label, const __u8 *imac, const __u8 *gw,
				       __be16 eproto)
{
	if (nvgre_room(ctx, l3_off, ip_len, NVGRE6_STACK_LEN))
		return -1;
	void *data = (void *)(long)ctx->data;

	struct ethhdr *oeth = data;
	__be32 *oip = data + ETH_HLEN_;
	struct gre_key_hdr *gre = data + ETH_HLEN_ + 40;
	struct ethhdr *ieth = data + ETH_HLEN_ + 40 + GRE_HLEN_KEY;

	__builtin_memcpy(oeth->h_dest, odst, ETH_ALEN_);
	__builtin_memcpy(oeth->h_source, osrc, ETH_ALEN_);
	oeth->h_proto = bpf_htons(ETH_P_IPV6_);

	/* version, traffic class, flow label; payload length, next header,
	 * hop limit; the addresses. */
	oip[0] = bpf_htonl(6 << 28 | (__u32)tos << 20 | (label & 0xfffff));
	oip[1] = bpf_htonl((__u32)(ip_len + NVGRE6_OVERHEAD - 40) << 16 | IPPROTO_GRE_ << 8 | OUTER_TTL);
	__builtin_memcpy(&oip[2], saddr, 16);
	__builtin_memcpy(&oip[6], daddr, 16);

	gre->flags = bpf_htons(GRE_FLAG_K);
	gre->proto = bpf_htons(GRE_PROTO_TEB);
	gre->key = bpf_htonl(key);

	__builtin_memcpy(ieth->h_dest, imac, ETH_ALEN_);
	__builtin_memcpy(ieth->h_source, gw, ETH_ALEN_);
	ieth->h_proto = eproto;
	return 0;
}

/* Encapsulates the IPv4 packet at l3_off (ip_len bytes) toward daddr
 * from saddr, with key and outer TOS tos: the outer frame to the next hop
 * fib resolved (its MACs), the inner one from isrc to idst (neither in the
 * frame). Returns 0, or -1 when the frame cannot be resized (nvgre_push). */
static __always_inline int nvgre_to(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len, __u8 tos,
				    const struct bpf_fib_lookup *fib, __be32 saddr, __be32 daddr, __u32 key,
				    const __u8 *idst, const __u8 *isrc)
{
	struct nvgre_spec s = {.odst = fib->dmac, .osrc = fib->smac, .idst = idst, .isrc = isrc,
			       .saddr = saddr, .daddr = daddr, .key = key, .tos = tos};
	return nvgre_push(ctx, l3_off, ip_len, &s);
}

/* nvgre_to with the MACs in word copies (mac_copy): every MAC in a map
 * value (fib in a per-CPU room, the inner ones in the config), none on
 * the stack. The IPv6 EIPs' and VIPs' encapsulation on the edge. */
static __always_inline int nvgre_to_w(struct xdp_md *ctx, __u32 l3_off, __u16 ip_len, __u8 tos,
				      const struct bpf_fib_lookup *fib, __be32 saddr, __be32 daddr, __u32 key,
				      const __u8 *idst, const __u8 *isrc)
{
	struct nvgre_spec s = {.odst = fib->dmac, .osrc = fib->smac, .idst = idst, .isrc = isrc,
			       .saddr = saddr, .daddr = daddr, .key = key, .tos = tos};
	return nvgre_push_at(ctx, l3_off, ip_len, &s, 1);
}

/* Whether the parsed IPv4 packet p is GRE to this node's underlay
 * address, the config's *underlay (0: none configured, nothing is). The
 * address is read here, not by the caller: read before the call, clang 14
 * keeps it where xdp_edge's spills land beyond 128 bytes of stack (35
 * longer instructions once JIT-compiled). */
static __always_inline int nvgre_for_us(const struct pkt *p, const __be32 *underlay)
{
	return p->proto == IPPROTO_GRE_ && p->daddr == *underlay && *underlay;
}

/* Validates an NVGRE packet whose outer IPv4 header (o) is already parsed,
 * then the inner Ethernet and IPv4 headers (into in). Returns 0 with the
 * VSID, or a drop reason. */
static __always_inline int nvgre_pull(void *data, void *data_end, const struct pkt *o,
				      struct pkt *in, __u32 *vsid)
{
	if (o->frag)
		return STAT_DROP_GRE_BAD; /* tunnel packets are never reassembled here */
	struct gre_key_hdr *gre = data + OFF(o->l4_off);
	if ((void *)(gre + 1) > data_end)
		return STAT_DROP_GRE_BAD;
	if (gre->flags != bpf_htons(GRE_FLAG_K) || gre->proto != bpf_htons(GRE_PROTO_TEB))
		return STAT_DROP_GRE_BAD;
	*vsid = bpf_ntohl(gre->key) >> 8;

	__u32 inner_eth = o->l4_off + GRE_HLEN_KEY;
	struct ethhdr *ieth = data + OFF(inner_eth);
	if ((void *)(ieth + 1) > data_end)
		return STAT_DROP_INNER_BAD;
	if (ieth->h_proto != bpf_htons(ETH_P_IP_))
		return STAT_DROP_INNER_BAD; /* IPv4 only; RFC 7637 forbids inner 802.1Q */
	in->l3_off = inner_eth + ETH_HLEN_;
	if (parse_ipv4(data, data_end, in))
		return STAT_DROP_INNER_BAD;
	/* The inner packet must lie inside the outer one. */
	if (in->l3_off + in->ip_len > o->l3_off + o->ip_len)
		return STAT_DROP_INNER_BAD;
	return 0;
}

/* Removes the outer headers of a pulled NVGRE frame so the inner Ethernet
 * frame starts at ctx->data, and drops outer padding. Returns 0 or -1. */
static __always_inline int nvgre_strip(struct xdp_md *ctx, const struct pkt *in)
{
	__u32 inner_eth = in->l3_off - ETH_HLEN_;
	if (bpf_xdp_adjust_head(ctx, inner_eth))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int have = data_end - data;
	int want = ETH_HLEN_ + in->ip_len;
	if (have > want && bpf_xdp_adjust_tail(ctx, want - have))
		return -1;
	return 0;
}

/* entry.h's AZG_UL6_OUTER, both programs: p as their IPv4 NVGRE path
 * reads the outer headers, from the ones their IPv6 underlay's parse left
 * in o (the edge's ul6_from_host, the agent's agent_ul6_in). */
static __always_inline void ul6_outer_pkt(struct pkt *p, const struct ul6_outer *o)
{
	p->l3_off = o->l3_off;
	p->l4_off = o->l4_off;
	p->ip_len = o->ip_len;
	p->frag = o->frag;
	p->proto = IPPROTO_GRE_;
	p->saddr = o->host;
	p->daddr = o->daddr;
	p->ports = 0;
	p->l4_ok = 0;
	p->tcp_flags = 0;
}

#endif
