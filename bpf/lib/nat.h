/* nat.h: 1:1 address translation of IPv4 packets with incremental checksum
 * updates (RFC 1624), including the packet quoted in an ICMP error so that
 * errors about a translated flow reach the endpoint that owns it
 * (RFC 5508 section 4.1 behaviour for 1:1 NAT). */
#ifndef AZG_NAT_H
#define AZG_NAT_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "csum.h"
#include "parse.h"

static __always_inline int icmp_is_error(__u8 type)
{
	return type == ICMP_DEST_UNREACH_ || type == ICMP_TIME_EXCEEDED_ ||
	       type == ICMP_PARAMETERPROB_ || type == ICMP_SOURCE_QUENCH_ || type == ICMP_REDIRECT_;
}

/* Updates the L4 checksum of a TCP/UDP header at l4 for an address change.
 * Returns -1 when the header is out of bounds. */
static __always_inline int nat_l4_csum(void *l4, void *data_end, __u8 proto, __be32 from, __be32 to)
{
	if (proto == IPPROTO_TCP_) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -1;
		th->check = csum_replace4(th->check, from, to);
	} else if (proto == IPPROTO_UDP_) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return -1;
		uh->check = csum_replace4_udp(uh->check, from, to);
	}
	return 0;
}

/* In an ICMP error at l4 (whose checksum covers the quote), rewrites the
 * quoted packet's address `which` (0: source, 1: destination) from -> to,
 * fixing the quoted IP checksum and the ICMP checksum. The quoted L4
 * checksum is left alone: quotes are usually truncated, and hosts match
 * errors by addresses and ports (as Linux conntrack does). */
static __always_inline int nat_icmp_quote(void *l4, void *data_end, int which, __be32 from, __be32 to)
{
	struct icmphdr_ *ih = l4;
	struct iphdr *q = (void *)(ih + 1);
	if ((void *)(q + 1) > data_end)
		return -1;
	__be32 *a = which ? &q->daddr : &q->saddr;
	if (*a != from)
		return 0; /* not about this flow: leave it */
	__u16 old_check = q->check;
	*a = to;
	q->check = csum_replace4(q->check, from, to);
	__u16 c = csum_replace4(ih->checksum, from, to);
	ih->checksum = csum_replace2(c, old_check, q->check);
	return 0;
}

/* Rewrites the destination (dst=1) or source (dst=0) address of the IPv4
 * packet p from -> to. Returns 0 or -1 on a bounds failure. */
static __always_inline int nat4(void *data, void *data_end, const struct pkt *p, int dst, __be32 to)
{
	struct iphdr *iph = data + OFF(p->l3_off);
	if ((void *)(iph + 1) > data_end)
		return -1;
	__be32 from = dst ? iph->daddr : iph->saddr;
	if (dst)
		iph->daddr = to;
	else
		iph->saddr = to;
	iph->check = csum_replace4(iph->check, from, to);
	if (!p->l4_ok)
		return 0; /* later fragment: no L4 header to fix */
	void *l4 = data + OFF(p->l4_off);
	if (p->proto == IPPROTO_ICMP_) {
		struct icmphdr_ *ih = l4;
		if ((void *)(ih + 1) > data_end)
			return -1;
		/* An error about our flow quotes it with the roles swapped. */
		if (icmp_is_error(ih->type))
			return nat_icmp_quote(l4, data_end, dst ? 0 : 1, from, to);
		return 0;
	}
	return nat_l4_csum(l4, data_end, p->proto, from, to);
}

/* Rewrites the destination (dst=1) or source port of the TCP/UDP packet p,
 * fixing its checksum. Other protocols and later fragments are left. */
static __always_inline int nat4_port(void *data, void *data_end, const struct pkt *p, int dst, __be16 to)
{
	if (!p->l4_ok)
		return 0;
	void *l4 = data + OFF(p->l4_off);
	if (p->proto == IPPROTO_TCP_) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -1;
		__be16 from = dst ? th->dest : th->source;
		if (dst)
			th->dest = to;
		else
			th->source = to;
		th->check = csum_replace2(th->check, from, to);
	} else if (p->proto == IPPROTO_UDP_) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return -1;
		__be16 from = dst ? uh->dest : uh->source;
		if (dst)
			uh->dest = to;
		else
			uh->source = to;
		if (uh->check) {
			__u16 c = csum_replace2(uh->check, from, to);
			uh->check = c ? c : 0xffff;
		}
	}
	return 0;
}

/* The quoted packet of an ICMP error at l4 and its ports (source,
 * destination), or NULL when the quote is too short for them. */
static __always_inline __be16 *icmp_quote_ports(void *l4, void *data_end, struct iphdr **quote)
{
	struct icmphdr_ *ih = l4;
	struct iphdr *q = (void *)(ih + 1);
	if ((void *)(q + 1) > data_end)
		return NULL;
	__u32 qhl = q->ihl * 4;
	if (qhl < 20 || qhl > 60)
		return NULL;
	__be16 *pp = (void *)q + qhl;
	if ((void *)(pp + 2) > data_end)
		return NULL;
	*quote = q;
	return pp;
}

/* In an ICMP error at l4, rewrites the quoted packet's source (which=0) or
 * destination port from -> to, fixing the ICMP checksum. */
static __always_inline int nat_icmp_quote_port(void *l4, void *data_end, int which, __be16 from, __be16 to)
{
	struct icmphdr_ *ih = l4;
	struct iphdr *q;
	__be16 *pp = icmp_quote_ports(l4, data_end, &q);
	if (!pp)
		return -1;
	if (pp[which ? 1 : 0] != from)
		return 0;
	pp[which ? 1 : 0] = to;
	ih->checksum = csum_replace2(ih->checksum, from, to);
	return 0;
}

/* The flow an ICMP error at l4 is about, as (src, dst, sport, dport) of the
 * quoted packet; room is the length of the IPv4 packet from l4 on. Returns
 * 0, or -1 when the quote is too short. */
static __always_inline int icmp_quoted_flow(void *l4, void *data_end, __u32 room, __be32 *src, __be32 *dst,
					    __be16 *sport, __be16 *dport, __u8 *proto)
{
	struct iphdr *q;
	__be16 *pp = icmp_quote_ports(l4, data_end, &q);
	if (!pp)
		return -1;
	/* The quote must hold the ports within the packet: what follows the
	 * IPv4 packet in the frame (Ethernet padding) is not part of it. */
	if (sizeof(struct icmphdr_) + q->ihl * 4 + 4 > room)
		return -1;
	*src = q->saddr;
	*dst = q->daddr;
	*proto = q->protocol;
	*sport = pp[0];
	*dport = pp[1];
	return 0;
}

/* ---- IPv6 (nat mode for IPv6 VIPs): no IP header checksum; the TCP,
 * UDP and ICMPv6 checksums cover the pseudo-header's addresses. ---- */

/* lb_nat6's answer for an IPv6 UDP datagram with a zero checksum (RFC 8200
 * 8.1: not allowed; it is not computed over the payload here). */
#define LB_NAT6_UDP_CSUM0 (-2)

/* Updates the L4 checksum at l4 (TCP, UDP, ICMPv6) for a pseudo-header
 * address change from -> to (four words each, as loaded). Returns 0, -1
 * when the header is out of bounds, LB_NAT6_UDP_CSUM0. */
static __always_inline int lb_nat6_csum(void *l4, void *data_end, __u8 proto, const __be32 *from, const __be32 *to)
{
	if (proto == IPPROTO_TCP_) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -1;
		th->check = csum_replace16(th->check, from, to);
	} else if (proto == IPPROTO_UDP_) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return -1;
		if (!uh->check)
			return LB_NAT6_UDP_CSUM0;
		__u16 c = csum_replace16(uh->check, from, to);
		uh->check = c ? c : 0xffff;
	} else if (proto == IPPROTO_ICMPV6_) {
		struct icmphdr_ *ih = l4;
		if ((void *)(ih + 1) > data_end)
			return -1;
		ih->checksum = csum_replace16(ih->checksum, from, to);
	}
	return 0;
}

/* Rewrites the destination (dst=1) or source (dst=0) address of the IPv6
 * packet p6 to `to` (agent.c's nat6 for the edge's nat mode), fixing the L4 checksum (a later fragment has none to
 * fix). The old address is p6's (the parser's copy, not the packet's).
 * Returns 0, -1 (bounds) or LB_NAT6_UDP_CSUM0, before writing anything. */
static __always_inline int lb_nat6(void *data, void *data_end, const struct pkt6 *p6, int dst, const struct ip_addr *to)
{
	struct ipv6hdr *ip6 = data + OFF(p6->p.l3_off);
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	if (p6->p.l4_ok) {
		int rc = lb_nat6_csum(data + OFF(p6->p.l4_off), data_end, p6->p.proto, dst ? p6->daddr.a : p6->saddr.a,
				      to->a);
		if (rc)
			return rc;
	}
	if (dst)
		__builtin_memcpy(&ip6->daddr, to, 16);
	else
		__builtin_memcpy(&ip6->saddr, to, 16);
	return 0;
}

/* In the ICMPv6 error at l4 of p6 whose quote is at qoff (icmp6_quote_off),
 * rewrites the quoted packet's address `which` (0: source, 1: destination)
 * from -> to and, when fport != tport, its port `which` fport -> tport,
 * fixing the ICMPv6 checksum (the quote's own L4 checksum is left, as
 * nat_icmp_quote leaves it). A quote not about this flow is left alone.
 * Returns 0 or -1 (bounds). */
static __always_inline int lb_nat6_quote(void *data, void *data_end, const struct pkt6 *p6, __u32 qoff, int which,
					   const struct ip_addr *from, const struct ip_addr *to, __be16 fport,
					   __be16 tport)
{
	struct icmphdr_ *ih = data + OFF(p6->p.l4_off);
	struct ipv6hdr *q = data + OFF(qoff);
	__be16 *qp = data + OFF(qoff + 40);
	if ((void *)(ih + 1) > data_end || (void *)(q + 1) > data_end || (void *)(qp + 2) > data_end)
		return -1;
	__be32 *a = which ? q->daddr.in6_u.u6_addr32 : q->saddr.in6_u.u6_addr32;
	if (a[0] != from->a[0] || a[1] != from->a[1] || a[2] != from->a[2] || a[3] != from->a[3])
		return 0;
	__u16 c = csum_replace16(ih->checksum, from->a, to->a);
	__builtin_memcpy(a, to, 16);
	__be16 *pp = &qp[which ? 1 : 0];
	if (fport != tport && *pp == fport) {
		*pp = tport;
		c = csum_replace2(c, fport, tport);
	}
	ih->checksum = c;
	return 0;
}

#endif
