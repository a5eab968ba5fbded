/* benchmode.h: lets BPF_PROG_TEST_RUN's repeat mode time programs that move
 * headers. Repeat mode runs the program again and again on the same buffer;
 * a program that pushes 42 bytes of headers runs out of the 256-byte
 * headroom after a few runs and would then only time its error path.
 * bench.c's xdp_chain first puts the frame back as it was (head offset and
 * its first BENCH_COPY bytes, from bench_frame), then tail-calls the real
 * entry point; the cost of the restore alone is measured by xdp_restore.
 * (The edge and agent objects had *_bench entry points of their own until
 * 2026-12-03: unused since xdp_chain, they cost about 600k verifier
 * instructions at every load.) */
#ifndef AZG_BENCHMODE_H
#define AZG_BENCHMODE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"


/* Frames must be at least BENCH_COPY bytes. Returns 0 or -1. */
static __always_inline int bench_restore(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct bench_frame *f = bpf_map_lookup_elem(&bench_frame, &zero);
	if (!f)
		return -1;
	int len = (long)ctx->data_end - (long)ctx->data;
	int delta = len - (int)f->len;
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + BENCH_COPY > data_end)
		return -1;
	__u64 *dst = data;
	__u64 *src = (__u64 *)f->data;
#pragma unroll
	for (int i = 0; i < BENCH_COPY / 8; i++)
		dst[i] = src[i];
	return 0;
}

#endif
