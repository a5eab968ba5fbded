package model

import (
	"net/netip"
	"strings"
	"testing"
)

func TestGuestCopyStored(t *testing.T) {
	h := &Host{Name: "h1", AZ: "az1", Underlay: netip.MustParseAddr("198.18.1.1"),
		Guests: []Guest{{Name: "g1", Address: netip.MustParseAddr("198.19.1.1"), VSID: 5000}}}
	good := `{"host":"h1","underlay":"198.18.1.1","guest":{"name":"g1","address":"198.19.1.1","vsid":5000}}`
	o, err := DecodeStored(KindGuestCopy, "h1/g1", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c := o.(*GuestCopy); *c != *NewGuestCopy(h, h.Guests[0]) {
		t.Errorf("decoded %+v", c)
	}
	for _, tc := range []struct{ key, data, want string }{
		{"h1/g2", good, "names itself"},
		{"h1/g1", strings.Replace(good, "5000", "1", 1), "vsid"},
		{"h1/g1", strings.Replace(good, `"198.18.1.1"`, `"0.0.0.0"`, 1), "underlay"},
		{"h1/g1", strings.Replace(good, `"host":"h1"`, `"host":"h1","host":"h2"`, 1), "duplicate"},
		{"h1/g1", strings.Replace(good, `"host"`, `"Host"`, 1), "case"},
		{"h1/g1", strings.Replace(good, `"host":"h1"`, `"host":"h1","x":1`, 1), "unknown"},
	} {
		if _, err := DecodeStored(KindGuestCopy, tc.key, []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err %v, want one naming %q", tc.key, tc.data, err, tc.want)
		}
	}
	if _, err := Decode(KindGuestCopy, []byte(good)); err == nil {
		t.Error("the API decodes a guest copy: it is no API kind")
	}
}
