/* entry.h: the prologue of the XDP entry points (xdp_edge,
 * xdp_agent_underlay, xdp_agent_guest): Ethernet, its VLAN tags and
 * IPv4 parsed into one struct pkt, and the verdict, counted, for every
 * frame that goes no further: malformed (dropped under its reason, as
 * parse.h gives it), IPv6 and other non-IPv4 (passed to the kernel). */
#ifndef AZG_ENTRY_H
#define AZG_ENTRY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"
#include "parse.h"
#include "stats.h"

/* parse_frame's answers besides an XDP action (never negative). */
#define FRAME_IPV4 (-1) /* p holds a valid IPv4 packet: go on */
#define FRAME_ARP (-2)  /* an ARP frame (with FRAME_F_ARP only): p->l3_off is set */

/* What a program does with frames that are not IPv4. */
#define FRAME_F_ARP 0x1       /* ARP: FRAME_ARP, the caller answers (else passed as non-IP) */
#define FRAME_F_DROP_IPV6 0x2 /* IPv6: dropped, counted as drop_local (else passed, pass_ipv6) */

/* Parses the frame (len bytes) from data into p. Returns FRAME_IPV4,
 * FRAME_ARP or the XDP action for the frame, already counted. flags is a
 * constant of each caller: the checks it turns off cost nothing. */
static __always_inline int parse_frame(struct xdp_md *ctx, void *data, void *data_end, struct pkt *p, __u64 len, int flags)
{
	int rc = parse_eth(data, data_end, p);
	if (rc)
		return count_drop(ctx, rc, len);
	if (p->eth_proto == ETH_P_IPV6_) {
		if (flags & FRAME_F_DROP_IPV6)
			return count_drop(ctx, STAT_DROP_LOCAL, len);
		return count_pass(ctx, STAT_PASS_IPV6, len);
	}
	if ((flags & FRAME_F_ARP) && p->eth_proto == ETH_P_ARP_)
		return FRAME_ARP;
	if (p->eth_proto != ETH_P_IP_)
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	rc = parse_ipv4(data, data_end, p);
	if (rc)
		return count_drop(ctx, rc, len);
	return FRAME_IPV4;
}

#endif
