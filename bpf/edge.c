//go:build ignore

/* edge.c: the azgate edge data plane (XDP), attached to the edge's
 * Internet-facing and underlay interfaces.
 *
 * Internet -> host: a packet for an EIP is encapsulated in NVGRE to the
 * underlay address of the AZ host the EIP is bound to.
 * Host -> Internet: NVGRE addressed to this edge is decapsulated and
 * forwarded, but only if its inner source is an EIP bound to the host that
 * sent it (anti-spoofing).
 * Everything else well-formed goes to the kernel untouched; anything
 * malformed is counted and dropped. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/consts.h"
#include "lib/structs.h"
#include "lib/csum.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/stats.h"
#include "lib/nvgre.h"
#include "lib/icmp.h"
#include "lib/fib.h"
#include "lib/benchmode.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* EIP -> the host it is bound to. Written by the edge daemon from etcd. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_MAX);
	__type(key, struct eip_key);
	__type(value, struct eip_route);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_routes SEC(".maps");

/* Per-EIP packet and byte counters, indexed by eip_route.stats_idx. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EIP_MAX);
	__type(key, __u32);
	__type(value, struct eip_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_stats SEC(".maps");

/* The edge's own addresses and settings (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct edge_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cfg SEC(".maps");

/* Internet -> host: encapsulate toward the EIP's host. */
static __always_inline int edge_to_host(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg,
					 const struct eip_route *r, __u64 len)
{
	struct bpf_fib_lookup fib;
	int rc;

	if (p->ttl <= 1) {
		if (!(cfg->flags & CFG_F_ICMP_TTL))
			return count_drop(STAT_DROP_TTL, len);
		rc = icmp4_error(ctx, p, ICMP_TIME_EXCEEDED_, ICMP_EXC_TTL_, 0, cfg->icmp_src.a[0],
				 cfg->icmp_rate, cfg->icmp_burst);
		if (rc == ICMP_SENT) {
			stat_add(STAT_ICMP_TTL_TX, len);
			return XDP_TX;
		}
		return count_drop(rc == ICMP_LIMITED ? STAT_DROP_ICMP_LIMIT : STAT_DROP_TTL, len);
	}

	rc = fib4c(ctx, &fib, cfg->nh_gen, cfg->underlay.a[0], r->host.a[0], p->ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		if (!p->df)
			return count_drop(STAT_DROP_TOO_BIG, len);
		__u16 mtu = fib.mtu_result > NVGRE_OVERHEAD + 68 ? fib.mtu_result - NVGRE_OVERHEAD : 68;
		rc = icmp4_error(ctx, p, ICMP_DEST_UNREACH_, ICMP_FRAG_NEEDED_, mtu, cfg->icmp_src.a[0],
				 cfg->icmp_rate, cfg->icmp_burst);
		if (rc == ICMP_SENT) {
			stat_add(STAT_ICMP_FRAG_TX, len);
			return XDP_TX;
		}
		return count_drop(rc == ICMP_LIMITED ? STAT_DROP_ICMP_LIMIT : STAT_DROP_TOO_BIG, len);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count_drop(fib_reason(rc), len);

	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + p->l3_off;
	if ((void *)(iph + 1) > data_end)
		return count_drop(STAT_DROP_IP_TRUNC, len);
	ipv4_dec_ttl(iph);

	struct nvgre_spec s;
	__builtin_memcpy(s.odst, fib.dmac, ETH_ALEN_);
	__builtin_memcpy(s.osrc, fib.smac, ETH_ALEN_);
	/* Inner destination: a locally administered MAC derived from the EIP
	 * (the agent rewrites it on delivery); source: the virtual router. */
	s.idst[0] = 0x02;
	s.idst[1] = 0x00;
	__builtin_memcpy(&s.idst[2], &p->daddr, 4);
	__builtin_memcpy(s.isrc, cfg->gw_mac, ETH_ALEN_);
	s.saddr = cfg->underlay.a[0];
	s.daddr = r->host.a[0];
	s.key = (r->vsid << 8) | (flow_hash4(p->saddr, p->daddr, p->ports, p->proto, cfg->hash_seed) & 0xff);
	s.tos = p->tos;

	__u32 idx = r->stats_idx;
	__u16 ip_len = p->ip_len;
	if (nvgre_push(ctx, p->l3_off, ip_len, &s))
		return count_drop(STAT_DROP_HEADROOM, len);

	struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
	if (es) {
		es->rx_packets++;
		es->rx_bytes += ip_len;
	}
	stat_add(STAT_ENCAP_TX, len);
	return xmit(ctx, fib.ifindex);
}

/* Host -> Internet: decapsulate NVGRE from an AZ host. */
static __always_inline int edge_from_host(struct xdp_md *ctx, struct pkt *o, const struct edge_config *cfg, __u64 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib;
	struct pkt in;
	__u32 vsid;
	int rc;

	/* NVGRE is only taken from the underlay: from the Internet side a
	 * forged host address must not get a packet past anti-spoofing. */
	if (cfg->ul_ifindex && ctx->ingress_ifindex != cfg->ul_ifindex)
		return count_drop(STAT_DROP_SPOOF, len);
	rc = nvgre_pull(data, data_end, o, &in, &vsid);
	if (rc)
		return count_drop(rc, len);
	if (ipv4_martian_dst(in.daddr))
		return count_drop(STAT_DROP_BAD_DST, len);

	struct eip_key k;
	eip_key4(&k, in.saddr);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if (!r || r->host.a[0] != o->saddr || r->vsid != vsid)
		return count_drop(STAT_DROP_SPOOF, len);
	if (in.ttl <= 1)
		return count_drop(STAT_DROP_TTL, len);

	rc = fib4c(ctx, &fib, cfg->nh_gen, in.saddr, in.daddr, in.ip_len, in.proto, in.tos);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return count_drop(STAT_DROP_TOO_BIG, len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(STAT_DROP_FIB, len);
	/* A guest must not reach the underlay through the edge (the lookup
	 * names the egress interface with NO_NEIGH too). */
	if (fib.ifindex == ctx->ingress_ifindex || fib.ifindex == cfg->ul_ifindex)
		return count_drop(STAT_DROP_BAD_DST, len);

	__u32 idx = r->stats_idx;
	__u16 ip_len = in.ip_len;
	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return count_drop(STAT_DROP_ETH_TRUNC, len);
	__u8 ours[ETH_ALEN_], peer[ETH_ALEN_];
	__builtin_memcpy(ours, oeth->h_dest, ETH_ALEN_);
	__builtin_memcpy(peer, oeth->h_source, ETH_ALEN_);

	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		struct iphdr *iph = data + in.l3_off;
		if ((void *)(iph + 1) > data_end)
			return count_drop(STAT_DROP_INNER_BAD, len);
		ipv4_dec_ttl(iph);
	}
	if (nvgre_strip(ctx, &in))
		return count_drop(STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(STAT_DROP_HEADROOM, len);

	struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
	if (es) {
		es->tx_packets++;
		es->tx_bytes += ip_len;
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* Let the kernel forward this one and resolve the neighbour. */
		__builtin_memcpy(eth->h_dest, ours, ETH_ALEN_);
		__builtin_memcpy(eth->h_source, peer, ETH_ALEN_);
		stat_add(STAT_DECAP_PASS, len);
		return XDP_PASS;
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN_);
	stat_add(STAT_DECAP_TX, len);
	return xmit(ctx, fib.ifindex);
}

static __always_inline int edge_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct pkt p;
	__u32 zero = 0;
	int rc;

	rc = parse_eth(data, data_end, &p);
	if (rc)
		return count_drop(rc, len);
	if (p.eth_proto == ETH_P_IPV6_)
		return count_pass(STAT_PASS_IPV6, len);
	if (p.eth_proto != ETH_P_IP_)
		return count_pass(STAT_PASS_NON_IP, len);
	rc = parse_ipv4(data, data_end, &p);
	if (rc)
		return count_drop(rc, len);

	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	if (p.proto == IPPROTO_GRE_ && p.daddr == cfg->underlay.a[0] && cfg->underlay.a[0])
		return edge_from_host(ctx, &p, cfg, len);

	struct eip_key k;
	eip_key4(&k, p.daddr);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if (!r)
		return count_pass(STAT_PASS_NOT_OURS, len);
	return edge_to_host(ctx, &p, cfg, r, len);
}

SEC("xdp")
int xdp_edge(struct xdp_md *ctx)
{
	return edge_main(ctx);
}

/* Timing entry point (see lib/benchmode.h); never attached. */
SEC("xdp")
int xdp_edge_bench(struct xdp_md *ctx)
{
	if (bench_restore(ctx))
		return XDP_ABORTED;
	return edge_main(ctx);
}
