/* fib.h: next-hop resolution with bpf_fib_lookup and the final transmit. */
#ifndef AZG_FIB_H
#define AZG_FIB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"

/* Looks dst up in the kernel FIB from the ingress interface's point of view
 * (forwarding must be enabled on it), checking tot_len against the route
 * MTU. Returns a BPF_FIB_LKUP_RET_* code; on FRAG_NEEDED fib->mtu_result
 * holds the MTU. */
static __always_inline int fib4(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __be32 src,
				__be32 dst, __u16 tot_len, __u8 proto, __u8 tos)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET_;
	fib->tos = tos;
	fib->l4_protocol = proto;
	fib->tot_len = tot_len;
	fib->ifindex = ctx->ingress_ifindex;
	fib->ipv4_src = src;
	fib->ipv4_dst = dst;
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* Drop reason for a failed lookup that is neither FRAG_NEEDED nor NO_NEIGH. */
static __always_inline __u32 fib_reason(int rc)
{
	return rc == BPF_FIB_LKUP_RET_NO_NEIGH ? STAT_DROP_NO_NEIGH : STAT_DROP_FIB;
}

static __always_inline int xmit(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

#endif
