//go:build ignore

/* bench.c: programs for measuring, not for forwarding.
 * xdp_floor: swap MACs and XDP_TX, the cheapest useful XDP program: the
 *   floor every data-plane cost is reported against.
 * xdp_sink: count and drop, to measure what a path delivers (ARP passes);
 *   on request it copies the next frame it counts into sink_cap.
 * xdp_gen: traffic generator for BPF_PROG_TEST_RUN live-frames mode: writes
 *   the header template over every frame (live-frame pages come back as the
 *   forwarding path left them) and cycles the source port over N flows
 *   (IPv4 or IPv6: the template says where its UDP header is). */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/structs.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stat_entry);
} sink_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_config);
} gen_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_seq SEC(".maps");

/* sink_cap: user space sets want; xdp_sink then copies the next frame it
 * counts (its first SINK_CAP_LEN bytes, and its length) and clears want,
 * so the lab suite can check that what a measurement counts is what it
 * means to measure. */
#define SINK_CAP_LEN 128
struct sink_cap {
	__u32 want;
	__u32 len;
	__u8 data[SINK_CAP_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_cap);
} sink_cap SEC(".maps");

SEC("xdp")
int xdp_floor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 tmp[ETH_ALEN];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	return XDP_TX;
}

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	/* ARP goes to the kernel: the sender's neighbour entry for this side
	 * must stay resolved through a measurement of any length. */
	if ((void *)(eth + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_ARP))
		return XDP_PASS;
	__u32 zero = 0;
	struct stat_entry *s = bpf_map_lookup_elem(&sink_count, &zero);
	if (s) {
		s->packets++;
		s->bytes += ctx->data_end - ctx->data;
	}
	struct sink_cap *cap = bpf_map_lookup_elem(&sink_cap, &zero);
	if (cap && cap->want) {
		__u64 len = data_end - data;
		__u64 n = len < SINK_CAP_LEN ? len : SINK_CAP_LEN;
		if (n > 0 && !bpf_xdp_load_bytes(ctx, 0, cap->data, n)) {
			cap->len = len;
			cap->want = 0;
		}
	}
	return XDP_DROP;
}

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;

	struct gen_config *c = bpf_map_lookup_elem(&gen_cfg, &zero);
	__u64 *seq = bpf_map_lookup_elem(&gen_seq, &zero);
	if (!c || !seq)
		return XDP_DROP;
	if (data + 64 > data_end)
		return XDP_DROP;
	/* 64 bytes in eight 8-byte stores: cheaper than a byte loop. */
	__u64 *dst = data;
	__u64 *src = (__u64 *)c->tmpl;
#pragma unroll
	for (int i = 0; i < 8; i++)
		dst[i] = src[i];
	__u32 flows = c->flows ? c->flows : 1;
	__u32 n = (*seq)++ % flows;
	__u32 off = c->udp_off ? c->udp_off : sizeof(struct ethhdr) + sizeof(struct iphdr);
	if (off > 64 - sizeof(struct udphdr))
		return XDP_DROP;
	struct udphdr *uh = data + off;
	if ((void *)(uh + 1) > data_end)
		return XDP_DROP;
	__be16 from = uh->source, to = bpf_htons(c->sport_base + (__u16)n);
	uh->source = to;
	/* A template with a UDP checksum (IPv6 needs one, RFC 8200 8.1)
	 * keeps it valid: RFC 1624's update, a computed 0 sent as 0xffff. */
	if (uh->check) {
		__u32 sum = (__u16)~uh->check;
		sum += (__u16)~from;
		sum += to;
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		__u16 check = ~sum;
		uh->check = check ? check : 0xffff;
	}
	return XDP_TX;
}

#include "lib/consts.h"
#include "lib/csum.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/benchmode.h"
#include "lib/nvgre.h"

/* Seed for xdp_flowhash. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_seed SEC(".maps");

/* xdp_flowhash: writes flow_hash4 of an IPv4 frame over the first four bytes
 * of its destination MAC and returns XDP_TX, so a test can hold the C hash
 * against internal/flowhash. */
SEC("xdp")
int xdp_flowhash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt p;
	__u32 zero = 0;

	if (parse_eth(data, data_end, &p) || p.eth_proto != ETH_P_IP_)
		return XDP_DROP;
	if (parse_ipv4(data, data_end, &p))
		return XDP_DROP;
	__u32 *seed = bpf_map_lookup_elem(&hash_seed, &zero);
	if (!seed)
		return XDP_DROP;
	__u32 h = flow_hash4(p.saddr, p.daddr, p.ports, p.proto, *seed);
	if (data + 4 > data_end)
		return XDP_DROP;
	__builtin_memcpy(data, &h, 4);
	return XDP_TX;
}

/* xdp_restore: only the per-repeat restore of lib/benchmode.h, then
 * XDP_TX: its cost is subtracted from the *_bench programs. */
SEC("xdp")
int xdp_restore(struct xdp_md *ctx)
{
	if (bench_restore(ctx))
		return XDP_ABORTED;
	return XDP_TX;
}

/* xdp_bare_encap: the least an IPv4 NVGRE encapsulation can cost: push a
 * constant header stack (no parsing, lookups or checks) and XDP_TX. */
SEC("xdp")
int xdp_bare_encap(struct xdp_md *ctx)
{
	if (bench_restore(ctx))
		return XDP_ABORTED;
	__u8 odst[ETH_ALEN_] = {2, 0, 0, 0, 0, 2}, osrc[ETH_ALEN_] = {2, 0, 0, 0, 0, 1};
	__u8 idst[ETH_ALEN_] = {2, 0, 0, 0, 0, 4}, isrc[ETH_ALEN_] = {2, 0, 0, 0, 0, 3};
	struct nvgre_spec s = {
		.odst = odst, .osrc = osrc, .idst = idst, .isrc = isrc,
		.saddr = bpf_htonl(0xc6120001), .daddr = bpf_htonl(0xc6121501), .key = 5001 << 8,
	};
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + ETH_HLEN_;
	if ((void *)(iph + 1) > data_end)
		return XDP_DROP;
	if (nvgre_push(ctx, ETH_HLEN_, bpf_ntohs(iph->tot_len), &s))
		return XDP_ABORTED;
	return XDP_TX;
}

/* xdp_adjust2: grows the head by 42 bytes and shrinks it back: twice the
 * cost of the head adjustment the bench restore makes after every
 * encapsulation or decapsulation, which the dataplane suite takes out of
 * the paths' figures. */
SEC("xdp")
int xdp_adjust2(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_head(ctx, -NVGRE_OVERHEAD))
		return XDP_ABORTED;
	if (bpf_xdp_adjust_head(ctx, NVGRE_OVERHEAD))
		return XDP_ABORTED;
	return XDP_TX;
}

/* Where xdp_fwd sends everything. */
struct fwd_config {
	__u32 ifindex;
	__u8 smac[6];
	__u8 dmac[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwd_config);
} fwd_cfg SEC(".maps");

/* xdp_fwd: the least an XDP forwarder does: rewrite the MACs and redirect
 * to a fixed interface. The lab suite's ceiling for one core. */
SEC("xdp")
int xdp_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	struct fwd_config *c = bpf_map_lookup_elem(&fwd_cfg, &zero);
	if (!c)
		return XDP_DROP;
	__builtin_memcpy(eth->h_source, c->smac, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, c->dmac, ETH_ALEN);
	return bpf_redirect(c->ifindex, 0);
}

/* xdp_jiffies: writes bpf_jiffies64() over the first 8 bytes of the frame
 * and returns XDP_TX: two runs a known time apart give CONFIG_HZ, which the
 * connection table's timeouts (in jiffies) need. */
SEC("xdp")
int xdp_jiffies(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + 8 > data_end)
		return XDP_DROP;
	__u64 j = bpf_jiffies64();
	__builtin_memcpy(data, &j, 8);
	return XDP_TX;
}

/* --- Chained measurement (tail call into the program under test) ---
 *
 * xdp_chain restores the frame (as xdp_restore), optionally gives the run
 * a client of its own, then tail-calls bench_target[0]: the real entry
 * point of the program under test (xdp_edge, xdp_agent_*), from this
 * version or from an older object file. The same chain into xdp_pass is
 * the calibration subtracted from every chained figure. Because the
 * program under test needs no bench entry point of its own, objects of any
 * earlier version can be measured the same way (--baseline-objects). */

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_target SEC(".maps");

/* bench_vary_cfg[0].on != 0: every run rewrites the client of a TCP/IPv4
 * frame (the last byte of the source address and the source port, both
 * checksums updated incrementally) from the per-CPU run counter
 * bench_vary_seq, so each run is a flow no earlier run had: n gives the
 * client (n & 0xff) and the port 1024 + (n >> 8) % 64512, 16.5 million
 * distinct flows. A TCP/IPv6 frame (no extension header) the same: the
 * last byte of its source address and its source port, the TCP checksum
 * updated (IPv6 has no header checksum). */
struct bench_vary {
	__u32 on;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_vary);
} bench_vary_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bench_vary_seq SEC(".maps");

static __always_inline int bench_vary(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct bench_vary *v = bpf_map_lookup_elem(&bench_vary_cfg, &zero);
	if (!v || !v->on)
		return 0;
	__u64 *seq = bpf_map_lookup_elem(&bench_vary_seq, &zero);
	if (!seq)
		return -1;
	__u32 n = (__u32)(*seq)++;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 *proto = data + 12;
	if ((void *)(proto + 1) > data_end)
		return -1;
	if (*proto == bpf_htons(ETH_P_IPV6_)) {
		__u8 *ip6 = data + ETH_HLEN_;
		if ((void *)(ip6 + 40) > data_end || ip6[6] != IPPROTO_TCP_)
			return -1;
		struct tcphdr *th6 = (void *)(ip6 + 40);
		if ((void *)(th6 + 1) > data_end)
			return -1;
		__be16 *sa6 = (__be16 *)(ip6 + 8 + 14); /* the source's last 16 bits */
		__be16 old_lo = *sa6, old_port = th6->source;
		__be16 new_lo = (old_lo & bpf_htons(0xff00)) | bpf_htons(n & 0xff);
		__be16 new_port = bpf_htons(1024 + (n >> 8) % 64512);
		*sa6 = new_lo;
		th6->source = new_port;
		th6->check = csum_replace2(csum_replace2(th6->check, old_lo, new_lo), old_port, new_port);
		return 0;
	}
	struct iphdr *iph = data + ETH_HLEN_;
	if ((void *)(iph + 1) > data_end || iph->ihl != 5 || iph->protocol != IPPROTO_TCP_)
		return -1;
	struct tcphdr *th = (void *)(iph + 1);
	if ((void *)(th + 1) > data_end)
		return -1;
	__be16 *sa = (__be16 *)&iph->saddr;
	__be16 old_lo = sa[1], old_port = th->source;
	__be16 new_lo = (old_lo & bpf_htons(0xff00)) | bpf_htons(n & 0xff);
	__be16 new_port = bpf_htons(1024 + (n >> 8) % 64512);
	sa[1] = new_lo;
	th->source = new_port;
	iph->check = csum_replace2(iph->check, old_lo, new_lo);
	th->check = csum_replace2(csum_replace2(th->check, old_lo, new_lo), old_port, new_port);
	return 0;
}

SEC("xdp")
int xdp_chain(struct xdp_md *ctx)
{
	if (bench_restore(ctx))
		return XDP_ABORTED;
	if (bench_vary(ctx))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &bench_target, 0);
	return XDP_ABORTED;
}

/* xdp_calls4: four calls of a function that is not inlined, then XDP_PASS.
 * (xdp_calls4 - xdp_pass) / 4 is what one call and return cost on this
 * CPU: with the SRSO "Safe RET" mitigation of AMD Zen every return goes
 * through a thunk (srso_return_thunk) whose return is mispredicted, which
 * is most of the harness's own per-run cost there (BENCHMARKS.md). Each
 * call takes the previous result, so clang cannot merge them. */
static __attribute__((noinline)) int bench_leaf(int x)
{
	asm volatile("" : "+r"(x));
	return x + 1;
}

SEC("xdp")
int xdp_calls4(struct xdp_md *ctx)
{
	int r = bench_leaf(0);
	r = bench_leaf(r);
	r = bench_leaf(r);
	r = bench_leaf(r);
	return r == 4 ? XDP_PASS : XDP_DROP;
}
