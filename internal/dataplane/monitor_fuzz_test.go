package dataplane

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzParseTuple: a monitor event's snap is whatever the wire carried
// (cut at the snap length): ParseTuple never reads past it, whatever the
// IPv6 extension header chain, the VLAN tags or the NVGRE inner frame
// claim, and what it reports of an IPv6 header is that header's bytes.
// The seeds are IPv6 frames with chains that point past the snap.
func FuzzParseTuple(f *testing.F) {
	eth := func(et uint16, l3 []byte) []byte {
		b := make([]byte, 14, 14+len(l3))
		binary.BigEndian.PutUint16(b[12:], et)
		return append(b, l3...)
	}
	ip6 := func(nh uint8, payload []byte) []byte {
		b := make([]byte, 40, 40+len(payload))
		b[0], b[6], b[7] = 0x60, nh, 64
		binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
		s, d := netip.MustParseAddr("2001:db8::1").As16(), netip.MustParseAddr("2001:db8::2").As16()
		copy(b[8:], s[:])
		copy(b[24:], d[:])
		return append(b, payload...)
	}
	f.Add(eth(0x86dd, ip6(17, []byte{0x9c, 0x40, 0, 53, 0, 8, 0, 0})))
	f.Add(eth(0x86dd, ip6(0, []byte{60, 255, 1, 4, 0, 0, 0, 0})))                         // hop-by-hop claiming 2048 bytes
	f.Add(eth(0x86dd, ip6(44, []byte{6, 0, 0, 1, 0, 0, 0, 1, 0x9c})))                     // first fragment, TCP cut at 1 byte
	f.Add(eth(0x86dd, ip6(44, []byte{58, 0, 0x05, 0xc8, 0, 0, 0, 1})))                    // later fragment
	f.Add(eth(0x8100, append([]byte{0, 7, 0x86, 0xdd}, ip6(43, []byte{58, 0, 4, 0})...))) // tagged, routing header cut
	f.Fuzz(func(t *testing.T, b []byte) {
		snap := append([]byte(nil), b...)
		tu := ParseTuple(snap[:len(snap):len(snap)])
		if !tu.OK || !tu.Src.Is6() || tu.Src.Is4In6() {
			return
		}
		// An IPv6 tuple's addresses are the bytes of an IPv6 header in
		// the frame, after Ethernet and up to two tags.
		for _, l3 := range []int{14, 18, 22} {
			if len(b) >= l3+40 && b[l3-2] == 0x86 && b[l3-1] == 0xdd &&
				netip.AddrFrom16([16]byte(b[l3+8:l3+24])) == tu.Src && netip.AddrFrom16([16]byte(b[l3+24:l3+40])) == tu.Dst {
				return
			}
		}
		if tu.Inner == nil {
			t.Errorf("IPv6 tuple %+v not read from an IPv6 header of the frame %x", tu, b)
		}
	})
}
