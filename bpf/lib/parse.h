/* parse.h: bounds-checked parsing of Ethernet / VLAN / IPv4 / IPv6 / L4.
 * Every read is checked against data_end; anything malformed yields a drop
 * reason (enum azg_stat) and is never forwarded. */
#ifndef AZG_PARSE_H
#define AZG_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "csum.h"
#include "ports.h"

/* ICMPv4 header (linux/icmp.h drags in libc headers). */
struct icmphdr_ {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	union {
		__be32 gateway;
		struct {
			__be16 unused;
			__be16 mtu;
		} frag;
	} un;
};

struct vlan_hdr_ {
	__be16 tci;
	__be16 proto;
};

/* What the parser learnt about a frame. Offsets are from ctx->data. */
struct pkt {
	__u32 l3_off;
	__u32 l4_off;
	__u16 eth_proto; /* host order */
	__u16 ip_len;    /* IPv4 total length, host order */
	__u16 frag;      /* host-order frag_off & (MF|offset) */
	__u8 proto;
	__u8 ttl;
	__u8 tos;
	__u8 df;
	__u8 l4_ok;      /* L4 header present (unfragmented or first fragment) */
	__u8 tcp_flags;
	__be32 saddr;
	__be32 daddr;
	__be32 ports;    /* sport,dport as on the wire (lib/ports.h); 0 for fragments and non-TCP/UDP */
};

/* A packet's source and destination ports, network order (0 where
 * p->ports is). */
static __always_inline __be16 pkt_sport(const struct pkt *p)
{
	return ports_sport(p->ports);
}

static __always_inline __be16 pkt_dport(const struct pkt *p)
{
	return ports_dport(p->ports);
}

/* Parses Ethernet and up to MAX_VLAN_DEPTH tags. Returns 0 or a drop reason. */
static __always_inline int parse_eth(void *data, void *data_end, struct pkt *p)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);

	if ((void *)(eth + 1) > data_end)
		return STAT_DROP_ETH_TRUNC;
	__u16 proto = bpf_ntohs(eth->h_proto);
#pragma unroll
	for (int i = 0; i < MAX_VLAN_DEPTH; i++) {
		if (proto != ETH_P_8021Q_ && proto != ETH_P_8021AD_)
			break;
		struct vlan_hdr_ *vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return STAT_DROP_ETH_TRUNC;
		proto = bpf_ntohs(vh->proto);
		off += sizeof(*vh);
	}
	if (proto == ETH_P_8021Q_ || proto == ETH_P_8021AD_)
		return STAT_DROP_ETH_TRUNC; /* deeper VLAN stack than we parse */
	p->eth_proto = proto;
	p->l3_off = off;
	return 0;
}

/* Addresses a router must never forward from or to (RFC 1812 5.3.7):
 * 0.0.0.0/8, 127.0.0.0/8, 224.0.0.0/4 and above (multicast, which the
 * edge does not route, class E and the limited broadcast). */
static __always_inline int ipv4_martian(__be32 a)
{
	__u8 first = bpf_ntohl(a) >> 24;
	return first == 0 || first == 127 || first >= 224;
}

/* Parses and validates the IPv4 header at p->l3_off and the first bytes of
 * its L4 header. Returns 0 or a drop reason. */
static __always_inline int parse_ipv4(void *data, void *data_end, struct pkt *p)
{
	struct iphdr *iph = data + OFF(p->l3_off);

	if ((void *)(iph + 1) > data_end)
		return STAT_DROP_IP_TRUNC;
	if (iph->version != 4 || iph->ihl < 5)
		return STAT_DROP_IP_BAD;
	__u32 hlen = iph->ihl * 4;
	if ((void *)iph + hlen > data_end)
		return STAT_DROP_IP_TRUNC;
	__u16 tot = bpf_ntohs(iph->tot_len);
	if (tot < hlen)
		return STAT_DROP_IP_BAD;
	if ((void *)iph + tot > data_end)
		return STAT_DROP_IP_TRUNC;
	if (!ipv4_csum_ok(iph, hlen, data_end))
		return STAT_DROP_IP_CSUM;
	if (ipv4_martian(iph->saddr))
		return STAT_DROP_IP_MARTIAN;

	__u16 fo = bpf_ntohs(iph->frag_off);
	p->ip_len = tot;
	p->frag = fo & (IP_MF_ | IP_OFFMASK_);
	p->df = (fo & IP_DF_) != 0;
	p->proto = iph->protocol;
	p->ttl = iph->ttl;
	p->tos = iph->tos;
	p->saddr = iph->saddr;
	p->daddr = iph->daddr;
	p->l4_off = p->l3_off + hlen;
	p->ports = 0;
	p->l4_ok = 0;
	p->tcp_flags = 0;
	if (fo & IP_OFFMASK_)
		return 0; /* later fragment: no L4 header */

	void *l4 = (void *)iph + hlen;
	__u32 l4_len = tot - hlen;
	switch (iph->protocol) {
	case IPPROTO_TCP_: {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th))
			return STAT_DROP_L4_TRUNC;
		if (th->doff < 5)
			return STAT_DROP_L4_TRUNC;
		if (!(fo & IP_MF_) && (__u32)th->doff * 4 > l4_len)
			return STAT_DROP_L4_TRUNC;
		p->tcp_flags = ((__u8 *)th)[13];
		if (!p->frag)
			p->ports = *(__be32 *)th;
		break;
	}
	case IPPROTO_UDP_: {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh))
			return STAT_DROP_L4_TRUNC;
		if (!p->frag)
			p->ports = *(__be32 *)uh;
		break;
	}
	case IPPROTO_ICMP_: {
		struct icmphdr_ *ih = l4;
		if ((void *)(ih + 1) > data_end || l4_len < sizeof(*ih))
			return STAT_DROP_L4_TRUNC;
		break;
	}
	default:
		break;
	}
	p->l4_ok = 1;
	return 0;
}

/* Decrements the TTL of a forwarded IPv4 packet, updating the checksum the
 * way the kernel's ip_decrease_ttl does (RFC 1624). */
static __always_inline void ipv4_dec_ttl(struct iphdr *iph)
{
	__u32 check = iph->check;
	check += bpf_htons(0x0100);
	iph->check = (__u16)(check + (check >= 0xFFFF));
	iph->ttl--;
}

static __always_inline void eip_key4(struct eip_key *k, __be32 addr)
{
	k->addr.a[0] = addr;
	k->addr.a[1] = 0;
	k->addr.a[2] = 0;
	k->addr.a[3] = 0;
	k->family = AF_INET_;
	k->pad[0] = 0;
	k->pad[1] = 0;
	k->pad[2] = 0;
}

#endif
