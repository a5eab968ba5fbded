/* csum.h: Internet checksum helpers (RFC 1071) and incremental updates
 * (RFC 1624) for header rewrites. */
#ifndef AZG_CSUM_H
#define AZG_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Sum of the ten 16-bit words of an option-less IPv4 header. */
static __always_inline __u32 csum_iph20(const void *iph)
{
	const __u16 *p = iph;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += p[i];
	return sum;
}

/* Checksum to store in a fresh option-less IPv4 header (check field zero). */
static __always_inline __u16 ipv4_csum20(const void *iph)
{
	return ~csum_fold32(csum_iph20(iph));
}

/* True when the IPv4 header of hlen bytes (20..60, already bounds-checked
 * against data_end by the caller for hlen) sums to 0xffff. */
static __always_inline int ipv4_csum_ok(const void *iph, __u32 hlen, const void *data_end)
{
	__u32 sum = csum_iph20(iph);
	if (hlen > 20) {
		const __u8 *opt = (const __u8 *)iph + 20;
		for (int i = 0; i < 20; i++) {
			if ((__u32)i * 2 + 20 >= hlen)
				break;
			const __u16 *w = (const __u16 *)(opt + i * 2);
			barrier_var(w); /* keep clang from rewriting the bounds check */
			if ((const void *)(w + 1) > data_end)
				return 0;
			sum += *w;
		}
	}
	return csum_fold32(sum) == 0xffff;
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for a 32-bit field change. */
static __always_inline __u16 csum_replace4(__u16 check, __be32 from, __be32 to)
{
	__u32 sum = (__u16)~check;
	sum += (__u16)~(from & 0xffff);
	sum += (__u16)~(from >> 16);
	sum += to & 0xffff;
	sum += to >> 16;
	return ~csum_fold32(sum);
}

/* Same for a 16-bit field. */
static __always_inline __u16 csum_replace2(__u16 check, __be16 from, __be16 to)
{
	__u32 sum = (__u16)~check;
	sum += (__u16)~from;
	sum += to;
	return ~csum_fold32(sum);
}

/* UDP over IPv4: a zero checksum means "none" and stays zero; a computed zero
 * is sent as 0xffff (RFC 768). */
static __always_inline __u16 csum_replace4_udp(__u16 check, __be32 from, __be32 to)
{
	if (check == 0)
		return 0;
	check = csum_replace4(check, from, to);
	return check ? check : 0xffff;
}

/* RFC 1624 for a 16-byte field (an IPv6 address in a pseudo-header):
 * from and to are four 32-bit words each, as loaded. The words are summed
 * whole in 64 bits (2^16 = 1 modulo 0xffff: the same ones' complement sum
 * as the 16-bit halves', and as positive, so the same result in
 * [1, 0xffff] once folded), a third of the instructions. */
static __always_inline __u16 csum_replace16(__u16 check, const __be32 *from, const __be32 *to)
{
	/* The sum of the four ~from[i] is 4 * 0xffffffff minus the sum of
	 * the from[i]: the same integer, without a complement and a
	 * truncation a word. */
	__u64 sum = (__u64)(__u16)~check + 4 * 0xffffffffULL;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		sum += to[i];
		sum -= from[i];
	}
	/* At most 0xffff + 8 * 0xffffffff: two folds fit 32 bits. */
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return ~csum_fold32((__u32)sum);
}

#endif
