/* hash.h: the azgate flow hash. Specified once, implemented identically here
 * and in internal/flowhash (a test holds the two together):
 *
 *   flow_hash4 = jhash_3words(saddr, daddr, ports, seed ^ proto)
 *
 * where saddr, daddr and ports (source port then destination port) are the
 * 32-bit words exactly as they sit in the packet, loaded little-endian (as
 * BPF on x86 and arm64 loads them), ports is 0 for fragments and protocols
 * without ports, and jhash_3words is Bob Jenkins' lookup3 as in Linux
 * include/linux/jhash.h.
 *
 * For IPv6 (flow_hash6), each 16-byte address is folded to one word, the
 * XOR of its four words as loaded, and hashed as flow_hash4 hashes:
 *
 *   flow_hash6 = jhash_3words(s0^s1^s2^s3, d0^d1^d2^d3, ports, seed ^ proto) */
#ifndef AZG_HASH_H
#define AZG_HASH_H

#include <linux/types.h>

#define JHASH_INITVAL 0xdeadbeef

static __always_inline __u32 rol32_(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

#define __jhash_final(a, b, c)        \
	{                             \
		c ^= b;               \
		c -= rol32_(b, 14);   \
		a ^= c;               \
		a -= rol32_(c, 11);   \
		b ^= a;               \
		b -= rol32_(a, 25);   \
		c ^= b;               \
		c -= rol32_(b, 16);   \
		a ^= c;               \
		a -= rol32_(c, 4);    \
		b ^= a;               \
		b -= rol32_(a, 14);   \
		c ^= b;               \
		c -= rol32_(b, 24);   \
	}

static __always_inline __u32 jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval)
{
	initval += JHASH_INITVAL + (3 << 2);
	a += initval;
	b += initval;
	c += initval;
	__jhash_final(a, b, c);
	return c;
}

static __always_inline __u32 flow_hash4(__be32 saddr, __be32 daddr, __be32 ports, __u8 proto, __u32 seed)
{
	return jhash_3words(saddr, daddr, ports, seed ^ proto);
}

/* The IPv6 flow hash: each 16-byte address folded to one word by XOR of
 * its four (as loaded, little-endian), then flow_hash4's mix
 * (internal/flowhash Hash6). */
static __always_inline __u32 flow_hash6(const __be32 *saddr, const __be32 *daddr, __be32 ports, __u8 proto,
					__u32 seed)
{
	return jhash_3words(saddr[0] ^ saddr[1] ^ saddr[2] ^ saddr[3], daddr[0] ^ daddr[1] ^ daddr[2] ^ daddr[3], ports,
			    seed ^ proto);
}

#endif
