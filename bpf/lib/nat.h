/* nat.h: 1:1 address translation of IPv4 packets with incremental checksum
 * updates (RFC 1624), including the packet quoted in an ICMP error so that
 * errors about a translated flow reach the endpoint that owns it
 * (RFC 5508 section 4.1 behaviour for 1:1 NAT). */
#ifndef AZG_NAT_H
#define AZG_NAT_H

#include <linux/bpf.h>
#include <linux/ip.h>
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
	struct iphdr *iph = data + p->l3_off;
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
	void *l4 = data + p->l4_off;
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

#endif
