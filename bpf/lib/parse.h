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

/* IPv6 (RFC 8200). What the parser learnt about an IPv6 packet: the
 * fields of struct pkt (as for IPv4: offsets, proto = the upper-layer
 * protocol after the extension headers, ttl = hop limit, tos = traffic
 * class, ip_len = 40 + payload length, frag = MF | offset in 8-byte units
 * as IPv4's, l4_ok, tcp_flags, ports; saddr and daddr 0) and the 16-byte
 * addresses. Apart from struct pkt, filled only for IPv6 in a function of
 * its own (entry.h's ipv6_frame), so the IPv4 paths keep their struct pkt,
 * its stack and their verifier states as they were. */
struct pkt6 {
	struct pkt p;
	struct ip_addr saddr;
	struct ip_addr daddr;
};

struct ipv6_opt_hdr_ {
	__u8 nexthdr;
	__u8 hdrlen; /* 8-byte units beyond the first 8 */
	__u8 type;   /* routing header: routing type */
	__u8 left;   /* routing header: segments left */
	__be32 rest;
};

struct ipv6_frag_hdr_ {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset << 3 | res (2) | M */
	__be32 id;
};

/* An upper-layer header chain of at most IPV6_MAX_EXT extension headers
 * (Cilium's IPV6_MAX_HEADERS is 4), whose upper-layer header starts in the
 * first IPV6_L4_OFF_MAX bytes of the frame (offsets are OFF()-bounded
 * everywhere): more is dropped as drop_ip6_ext_limit. */
#define IPV6_MAX_EXT 6
#define IPV6_L4_OFF_MAX 255

/* Classes of IPv6 sources no router forwards, and never from a wire:
 * :: (but for DAD's neighbour solicitations and MLD reports, ICMPv6 to a
 * link-scope multicast group, RFC 4861 7.2.2, RFC 3810 5.2.13), ::1,
 * multicast (ff00::/8) and IPv4-mapped (::ffff:0:0/96, RFC 4291 2.5.5.2). */
static __always_inline int ipv6_martian_src(const struct pkt6 *p)
{
	__u32 a0 = bpf_ntohl(p->saddr.a[0]);
	if ((a0 >> 24) == 0xff)
		return 1;
	if (a0 | p->saddr.a[1])
		return 0;
	__u32 a2 = bpf_ntohl(p->saddr.a[2]), a3 = bpf_ntohl(p->saddr.a[3]);
	if (a2 == 0xffff)
		return 1; /* IPv4-mapped */
	if (a2)
		return 0;
	if (a3 == 1)
		return 1; /* ::1 */
	if (a3)
		return 0;
	/* :: */
	return !(p->p.proto == IPPROTO_ICMPV6_ && (bpf_ntohl(p->daddr.a[0]) >> 16) == 0xff02);
}

/* Destinations no packet from a wire may have (RFC 4291): :: (2.5.2:
 * never a destination), ::1 (2.5.3: "a packet received on an interface
 * with a destination address of loopback must be dropped"), IPv4-mapped
 * (::ffff:0:0/96, 2.5.5.2: never on the wire, as for the source) and
 * multicast of scope 0 (2.7: reserved, "must be silently dropped") or 1
 * (interface-local: loopback only, 2.7 and its erratum 3480). Link-local
 * scope (ff02::/16: NDP, MLD) and wider are judged as before. */
static __always_inline int ipv6_martian_dst(const struct pkt6 *p)
{
	__u32 a0 = bpf_ntohl(p->daddr.a[0]);
	if ((a0 >> 24) == 0xff)
		return ((a0 >> 16) & 0xf) <= 1; /* scope 0 or 1 */
	if (a0 | p->daddr.a[1])
		return 0;
	__u32 a2 = bpf_ntohl(p->daddr.a[2]), a3 = bpf_ntohl(p->daddr.a[3]);
	if (a2 == 0xffff)
		return 1; /* IPv4-mapped */
	return !a2 && a3 <= 1; /* :: or ::1 */
}

/* fe80::/10 */
static __always_inline int ipv6_link_local(const struct ip_addr *a)
{
	return (bpf_ntohl(a->a[0]) & 0xffc00000) == 0xfe800000;
}

/* A link-local source off its link: to a destination neither link-local
 * nor multicast (RFC 4291 2.5.6: never forwarded), unless ICMPv6, which
 * the kernel judges (neighbour solicitations for unreachability
 * detection and redirects come from a router's link-local address to a
 * global one, RFC 4861 7.2.2, 8.1). */
static __always_inline int ipv6_off_link(const struct pkt6 *p)
{
	return ipv6_link_local(&p->saddr) && !ipv6_link_local(&p->daddr) &&
	       (bpf_ntohl(p->daddr.a[0]) >> 24) != 0xff && p->p.proto != IPPROTO_ICMPV6_;
}

/* Parses and validates the IPv6 header at p->p.l3_off, its extension
 * headers and the first bytes of its L4 header, as parse_ipv4 does for
 * IPv4. Returns 0 or a drop reason:
 * - drop_ip_trunc: the fixed header, or the payload length, beyond the
 *   frame (bytes after the payload are allowed, as Ethernet padding);
 * - drop_ip_bad: version not 6;
 * - drop_ip6_ext_limit: more than IPV6_MAX_EXT extension headers, or the
 *   upper-layer header beyond IPV6_L4_OFF_MAX;
 * - drop_ip6_ext_bad: hop-by-hop options anywhere but first, a second
 *   fragment header, an extension header that does not fit in the payload;
 * - drop_ip6_rh0: a routing header of type 0 (RFC 5095);
 * - drop_ip6_tiny_frag: a first fragment without the whole header chain
 *   and upper-layer header (RFC 7112; TCP 20 bytes, UDP 8, ICMPv6 8);
 * - drop_l4_trunc: an unfragmented packet's TCP/UDP/ICMPv6 header cut short.
 * Later fragments (offset > 0) carry no L4 header: p->frag set, l4_ok 0.
 * AH (RFC 4302) is walked as the extension header RFC 8200 4 lists it
 * as (its length in 4-byte units, a multiple of 8 bytes: else
 * drop_ip6_ext_bad), so a first fragment cannot end at an AH header and
 * leave the upper-layer header to a later fragment (RFC 7112). ESP ends
 * the walk as an upper-layer protocol (its payload is encrypted), as do
 * No Next Header and unknown protocols. */
static __always_inline int parse_ipv6_at(void *data, void *data_end, struct pkt6 *p6, int room)
{
	struct pkt *p = &p6->p;
	__u32 l3 = OFF(p->l3_off);
	struct ipv6hdr *ip6 = data + l3;

	if ((void *)(ip6 + 1) > data_end)
		return STAT_DROP_IP_TRUNC;
	if (ip6->version != 6)
		return STAT_DROP_IP_BAD;
	__u32 plen = bpf_ntohs(ip6->payload_len);
	if ((void *)(ip6 + 1) + plen > data_end)
		return STAT_DROP_IP_TRUNC;
	/* The packet's end, relative to data; at most a frame's length. */
	__u32 end = l3 + sizeof(*ip6) + plen;

	if (room) {
		/* In 8-byte words (a map value: no alignment checked), read
		 * back from p6 where used (kept in registers, the words split
		 * where 4-byte ones are used, they filled the stack). */
		ip6w_copy(&p6->saddr, &ip6->saddr);
		ip6w_copy(&p6->daddr, &ip6->daddr);
		asm volatile("" ::: "memory");
	} else {
		__builtin_memcpy(&p6->saddr, &ip6->saddr, 16);
		__builtin_memcpy(&p6->daddr, &ip6->daddr, 16);
	}
	p->ip_len = sizeof(*ip6) + plen;
	p->frag = 0;
	p->ttl = ip6->hop_limit;
	/* The traffic class: the first 16 bits are version, class and
	 * the flow label's top 4. */
	p->tos = (__u8)(bpf_ntohs(*(__be16 *)ip6) >> 4);
	p->df = 1; /* routers never fragment IPv6 */
	p->l4_ok = 0;
	p->tcp_flags = 0;
	p->saddr = 0;
	p->daddr = 0;
	p->ports = 0;

	__u8 nh = ip6->nexthdr;
	__u32 off = l3 + sizeof(*ip6);
	int first_frag = 0, seen_frag = 0;
	/* A bounded loop, not unrolled: one copy of the walk. */
#pragma clang loop unroll(disable)
	for (int i = 0; i <= IPV6_MAX_EXT; i++) {
		if (nh != IPPROTO_HOPOPTS_ && nh != IPPROTO_ROUTING_ && nh != IPPROTO_FRAGMENT_ && nh != IPPROTO_DSTOPTS_ &&
		    nh != IPPROTO_AH_)
			break;
		if (i == IPV6_MAX_EXT)
			return STAT_DROP_IP6_EXT_LIMIT;
		if (nh == IPPROTO_HOPOPTS_ && i)
			return STAT_DROP_IP6_EXT_BAD;
		if (off > IPV6_L4_OFF_MAX)
			return STAT_DROP_IP6_EXT_LIMIT;
		struct ipv6_opt_hdr_ *h = data + off;
		if ((void *)(h + 1) > data_end || off + sizeof(*h) > end)
			return first_frag ? STAT_DROP_IP6_TINY_FRAG : STAT_DROP_IP6_EXT_BAD;
		__u32 hlen = sizeof(*h);
		if (nh == IPPROTO_FRAGMENT_) {
			if (seen_frag)
				return STAT_DROP_IP6_EXT_BAD;
			seen_frag = 1;
			struct ipv6_frag_hdr_ *fh = (void *)h;
			__u16 fo = bpf_ntohs(fh->frag_off);
			p->frag = (fo >> 3) | ((fo & 1) ? IP_MF_ : 0);
			if (fo >> 3) {
				/* A later fragment: what follows is no header. */
				if (off + hlen > IPV6_L4_OFF_MAX)
					return STAT_DROP_IP6_EXT_LIMIT;
				p->proto = fh->nexthdr;
				p->l4_off = off + hlen;
				return 0;
			}
			/* The first (or an atomic, RFC 6946) fragment: the
			 * whole chain and L4 header must follow in it. */
			first_frag = (fo & 1);
		} else if (nh == IPPROTO_AH_) {
			/* RFC 4302 2.2: (length + 2) 4-byte units, a multiple
			 * of 8 bytes in IPv6, and at least its 12 fixed bytes. */
			if (h->hdrlen < 2 || (h->hdrlen & 1))
				return STAT_DROP_IP6_EXT_BAD;
			hlen = ((__u32)h->hdrlen + 2) * 4;
			if (off + hlen > end)
				return first_frag ? STAT_DROP_IP6_TINY_FRAG : STAT_DROP_IP6_EXT_BAD;
		} else {
			if (nh == IPPROTO_ROUTING_ && h->type == 0)
				return STAT_DROP_IP6_RH0;
			hlen = ((__u32)h->hdrlen + 1) * 8;
			if (off + hlen > end)
				return first_frag ? STAT_DROP_IP6_TINY_FRAG : STAT_DROP_IP6_EXT_BAD;
		}
		nh = h->nexthdr;
		off += hlen;
	}
	if (off > IPV6_L4_OFF_MAX)
		return STAT_DROP_IP6_EXT_LIMIT;
	p->proto = nh;
	p->l4_off = off;

	void *l4 = data + OFF(off);
	__u32 l4_len = end - off;
	__u32 short_reason = first_frag ? STAT_DROP_IP6_TINY_FRAG : STAT_DROP_L4_TRUNC;
	switch (nh) {
	case IPPROTO_TCP_: {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th))
			return short_reason;
		if (th->doff < 5)
			return STAT_DROP_L4_TRUNC;
		if (!first_frag && (__u32)th->doff * 4 > l4_len)
			return STAT_DROP_L4_TRUNC;
		p->tcp_flags = ((__u8 *)th)[13];
		if (!p->frag)
			p->ports = *(__be32 *)th;
		break;
	}
	case IPPROTO_UDP_: {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh))
			return short_reason;
		if (!p->frag)
			p->ports = *(__be32 *)uh;
		break;
	}
	case IPPROTO_ICMPV6_: {
		struct icmphdr_ *ih = l4;
		if ((void *)(ih + 1) > data_end || l4_len < sizeof(*ih))
			return short_reason;
		break;
	}
	default:
		break;
	}
	p->l4_ok = 1;
	return 0;
}

/* A struct pkt6 copied in 8-byte words: dst in a map value, src there or
 * 8-byte aligned on the stack (ipv6_frame's). */
static __always_inline void pkt6_copy(struct pkt6 *dst, const struct pkt6 *src)
{
	addr_w64 *d = (addr_w64 *)dst;
	const addr_w64 *s = (const addr_w64 *)src;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*dst) / 8); i++)
		d[i] = s[i];
}

/* parse_ipv6 into a struct pkt6 anywhere (the stack: 4-byte aligned). */
static __always_inline int parse_ipv6(void *data, void *data_end, struct pkt6 *p6)
{
	return parse_ipv6_at(data, data_end, p6, 0);
}

/* parse_ipv6 into a struct pkt6 in a map value (a per-CPU room): its
 * addresses copied in 8-byte words. */
static __always_inline int parse_ipv6_room(void *data, void *data_end, struct pkt6 *p6)
{
	return parse_ipv6_at(data, data_end, p6, 1);
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
