package model

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func u32(v uint32) *uint32 { return &v }

func TestBandwidthPackageValidate(t *testing.T) {
	ok := BandwidthPackage{Name: "shop", Capacity: 100_000_000, EIPs: []PackageEIP{
		{Address: addr("198.51.100.7"), Min: 20_000_000, Max: 80_000_000, Weight: u32(2)},
		{Address: addr("198.51.100.8")},
	}}
	for _, tc := range []struct {
		name  string
		edit  func(*BandwidthPackage)
		field string
		text  string
	}{
		{"no name", func(p *BandwidthPackage) { p.Name = "" }, "name", "required"},
		{"bad name", func(p *BandwidthPackage) { p.Name = "Shop" }, "name", "not a valid name"},
		{"no capacity", func(p *BandwidthPackage) { p.Capacity = 0 }, "capacity", "required"},
		{"tiny capacity", func(p *BandwidthPackage) { p.Capacity = 999; p.EIPs = nil }, "capacity", "at least 1kbit/s"},
		{"huge capacity", func(p *BandwidthPackage) { p.Capacity = MaxBandwidth + 1 }, "capacity", "at most 10Tbit/s"},
		{"short burst", func(p *BandwidthPackage) { p.Burst = Duration(time.Microsecond) }, "burst", "want 1ms-10s"},
		{"long burst", func(p *BandwidthPackage) { p.Burst = Duration(time.Minute) }, "burst", "want 1ms-10s"},
		{"description", func(p *BandwidthPackage) { p.Description = strings.Repeat("x", 1025) }, "description", "longer than 1024"},
		{"bad address", func(p *BandwidthPackage) { p.EIPs[1].Address = addr("224.0.0.1") }, "eips[1].address", "not a unicast"},
		{"no address", func(p *BandwidthPackage) { p.EIPs[1].Address = netip.Addr{} }, "eips[1].address", "required"},
		{"ipv6 link-local", func(p *BandwidthPackage) { p.EIPs[1].Address = addr("fe80::1") }, "eips[1].address", "not a global unicast address"},
		{"ipv4-mapped", func(p *BandwidthPackage) { p.EIPs[1].Address = addr("::ffff:198.51.100.8") }, "eips[1].address", "IPv4-mapped"},
		{"ipv6 unique local", func(p *BandwidthPackage) { p.EIPs[1].Address = addr("fd00::1") }, "eips[1].address", "cannot be announced"},
		{"twice", func(p *BandwidthPackage) { p.EIPs[1].Address = p.EIPs[0].Address }, "eips[1].address", "appears twice (eips[0])"},
		{"min above max", func(p *BandwidthPackage) { p.EIPs[0].Min = 90_000_000 }, "eips[0].min", "90Mbit/s is above the EIP's max 80Mbit/s"},
		{"tiny max", func(p *BandwidthPackage) { p.EIPs[1].Max = 10 }, "eips[1].max", "at least 1kbit/s"},
		{"huge max", func(p *BandwidthPackage) { p.EIPs[1].Max = MaxBandwidth + 1 }, "eips[1].max", "at most"},
		{"huge min", func(p *BandwidthPackage) { p.EIPs[1].Min = 1 << 63 }, "eips[1].min", "at most"},
		{"weight 0", func(p *BandwidthPackage) { p.EIPs[1].Weight = u32(0) }, "eips[1].weight", "want 1-10000"},
		{"weight high", func(p *BandwidthPackage) { p.EIPs[1].Weight = u32(10_001) }, "eips[1].weight", "want 1-10000"},
		{"mins over capacity", func(p *BandwidthPackage) { p.EIPs[1].Min = 80_000_001 },
			"eips", "add up to 100.000001Mbit/s (100000001 bit/s), more than the capacity 100Mbit/s (100000000 bit/s)"},
		{"too many", func(p *BandwidthPackage) {
			p.EIPs = nil
			for i := range MaxPackageEIPs + 1 {
				p.EIPs = append(p.EIPs, PackageEIP{Address: netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})})
			}
		}, "eips", "at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			p.EIPs = append([]PackageEIP(nil), ok.EIPs...)
			tc.edit(&p)
			wantErr(t, p.Validate().Err(), tc.field, tc.text)
		})
	}
	if es := ok.Validate(); len(es) > 0 {
		t.Fatalf("valid package: %v", es)
	}
	dual := ok
	dual.EIPs = append(append([]PackageEIP(nil), ok.EIPs...), PackageEIP{Address: addr("2001:db8:a::7"), Max: 10_000_000})
	if es := dual.Validate(); len(es) > 0 {
		t.Fatalf("a package with an IPv6 EIP: %v", es)
	}
	// Mins exactly at the capacity, no EIPs at all, a max above the
	// capacity: all valid.
	full := ok
	full.EIPs = []PackageEIP{{Address: addr("198.51.100.7"), Min: 60_000_000}, {Address: addr("198.51.100.8"), Min: 40_000_000, Max: MaxBandwidth}}
	empty := BandwidthPackage{Name: "empty", Capacity: MinBandwidth}
	for _, p := range []BandwidthPackage{full, empty} {
		if es := p.Validate(); len(es) > 0 {
			t.Errorf("%s: %v", p.Name, es)
		}
	}
}

func TestBandwidthPackageDefaults(t *testing.T) {
	p := BandwidthPackage{Name: "shop", Capacity: 100_000_000, EIPs: []PackageEIP{{Address: addr("198.51.100.7")}, {Address: addr("198.51.100.8"), Weight: u32(3)}}}
	if p.BurstTime() != DefaultBandwidthBurst || p.EIPs[0].W() != 1 {
		t.Errorf("before Defaults: burst %v, weight %d", p.BurstTime(), p.EIPs[0].W())
	}
	p.Defaults()
	b, _ := json.Marshal(p)
	if want := `{"name":"shop","capacity":100000000,"burst":"20ms","eips":[{"address":"198.51.100.7","weight":1},{"address":"198.51.100.8","weight":3}]}`; string(b) != want {
		t.Errorf("defaulted:\n%s\nwant\n%s", b, want)
	}
	// 100 Mbit/s for 20 ms is 250 kB; the product of the largest rate
	// and the longest burst does not overflow.
	if got := p.BurstBytes(100_000_000); got != 250_000 {
		t.Errorf("BurstBytes(100M) = %d", got)
	}
	p.Burst = Duration(MaxBandwidthBurst)
	if got := p.BurstBytes(MaxBandwidth); got != MaxBandwidth/8*10 {
		t.Errorf("BurstBytes(max) = %d", got)
	}
	if got := p.BurstBytes(^uint64(0)); got != ^uint64(0) { // 1.25 x 2^64: saturates
		t.Errorf("BurstBytes(2^64-1) = %d", got)
	}
	if e, ok := p.EIP(addr("198.51.100.8")); !ok || e.W() != 3 {
		t.Errorf("EIP(.8) = %+v, %v", e, ok)
	}
}

// TestBandwidthPackageReferences: listed EIPs exist and belong to one
// package; an EIP a package lists is not deleted; removing it from the
// package frees it.
func TestBandwidthPackageReferences(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	if _, err := s.Put(&Service{Name: "web", VIP: addr("198.51.100.20"), Mode: ModeNAT, TableSize: 101,
		Listeners: []Listener{{Protocol: ProtoTCP, Port: 80, Pool: "p"}},
		Pools:     []Pool{{Name: "p", Backends: []Backend{{Address: addr("198.19.9.1")}}}}}); err != nil {
		t.Fatal(err)
	}
	pkg := func(name string, eips ...string) *BandwidthPackage {
		p := &BandwidthPackage{Name: name, Capacity: 100_000_000}
		for _, a := range eips {
			p.EIPs = append(p.EIPs, PackageEIP{Address: addr(a)})
		}
		return p
	}
	wantErr(t, put(pkg("a", "198.51.100.7", "198.51.100.99")), "eips[1].address", "198.51.100.99 is not an EIP")
	wantErr(t, put(pkg("a", "198.51.100.20")), "eips[0].address", "the VIP of service web, not an EIP")
	if err := put(pkg("a", "198.51.100.7")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(pkg("b", "198.51.100.8", "198.51.100.7")), "eips[1].address", "EIP 198.51.100.7 already belongs to bandwidth package a")
	if err := put(pkg("b", "198.51.100.8")); err != nil {
		t.Fatal(err)
	}
	if p, ok := s.PackageOf(addr("198.51.100.7")); !ok || p != "a" {
		t.Errorf("PackageOf(.7) = %q, %v", p, ok)
	}
	// Replacing a package with its own EIPs is no conflict with itself.
	if err := put(pkg("a", "198.51.100.7")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEIP, "198.51.100.7"); err == nil || !strings.Contains(err.Error(), "belongs to bandwidth package a: remove it from the package first (azgate bandwidth remove-eip a 198.51.100.7)") {
		t.Errorf("deleting an EIP a package lists: %v", err)
	}
	// Out of a, into b; then deletable.
	if err := put(pkg("a")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.PackageOf(addr("198.51.100.7")); ok {
		t.Error("EIP removed from its package is still indexed")
	}
	if err := put(pkg("b", "198.51.100.8", "198.51.100.7")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindBandwidthPackage, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEIP, "198.51.100.7"); err != nil {
		t.Errorf("EIP of a deleted package: %v", err)
	}
	// Set and Remove (a state read back from the store) keep the index.
	s.Set(pkg("c", "198.51.100.8"))
	if p, _ := s.PackageOf(addr("198.51.100.8")); p != "c" {
		t.Errorf("after Set: %q", p)
	}
	s.Remove(KindBandwidthPackage, "c")
	if _, ok := s.PackageOf(addr("198.51.100.8")); ok {
		t.Error("after Remove: still indexed")
	}
}

func TestBandwidthPackageStrictJSON(t *testing.T) {
	for _, tc := range []struct{ body, text string }{
		{`{"name":"a","capacity":1e9}`, "capacity"},
		{`{"name":"a","capacity":"100M"}`, "capacity"},
		{`{"name":"a","capacity":-1}`, "capacity"},
		{`{"name":"a","Capacity":1000000}`, "differs from field \"capacity\" only by case"},
		{`{"name":"a","capacity":1000000,"capacity":2000000}`, "duplicate key"},
		{`{"name":"a","capacity":1000000,"eips":[{"address":"198.51.100.7","mins":5}]}`, "eips[0].mins: unknown field"},
		{`{"name":"a","capacity":1000000,"eips":[{"address":"198.51.100.7","weight":1.5}]}`, "eips[0].weight"},
		{`{"name":"a","capacity":1000000,"burst":20}`, "burst"},
		{`{"name":"a","capacity":1000000,"burst":"20 parsecs"}`, "burst"},
	} {
		_, err := Decode(KindBandwidthPackage, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.text)
		}
	}
	o, err := Decode(KindBandwidthPackage, []byte(`{"name":"a","capacity":100000000,"burst":"50ms","eips":[{"address":"198.51.100.7","min":1000000,"max":50000000,"weight":3}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := o.(*BandwidthPackage)
	if p.BurstTime() != 50*time.Millisecond || p.EIPs[0].Min != 1_000_000 || p.EIPs[0].W() != 3 {
		t.Errorf("decoded %+v", p)
	}
}

// TestBandwidthDocument: packages in a document, after the EIPs they name,
// errors placed.
func TestBandwidthDocument(t *testing.T) {
	d, err := ParseDocument([]byte(`
bandwidthpackages:
  - name: shop
    capacity: 100000000
    eips:
      - {address: 198.51.100.7, min: 10000000, weight: 2}
eips:
  - address: 198.51.100.7
`))
	if err != nil {
		t.Fatal(err)
	}
	objs := d.Objects()
	if len(objs) != 2 || KindOf(objs[0]) != KindEIP || KindOf(objs[1]) != KindBandwidthPackage {
		t.Fatalf("objects %v", objs)
	}
	_, err = ParseDocument([]byte(`
bandwidthpackages:
  - name: shop
    capacity: 100000000
    eips:
      - {address: 198.51.100.7, min: 60000000}
      - {address: 198.51.100.8, min: 50000000}
  - name: shop
    capacity: 1000000
`))
	if err == nil || !strings.Contains(err.Error(), "bandwidthpackages[0].eips: the EIPs' guaranteed minimums add up to 110Mbit/s") ||
		!strings.Contains(err.Error(), "bandwidthpackages[1]: bandwidth package shop also appears at bandwidthpackages[0]") {
		t.Errorf("document errors: %v", err)
	}
}

func TestParseBitRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0", 0}, {"1000", 1000}, {"100M", 100_000_000}, {"100m", 100_000_000}, {"1G", 1_000_000_000},
		{"10Mbit", 10_000_000}, {"10Mbit/s", 10_000_000}, {"10mbps", 10_000_000}, {"250kbps", 250_000},
		{"250Kb/s", 250_000}, {"1.5G", 1_500_000_000}, {"1.25k", 1250}, {"2T", 2_000_000_000_000},
		{"1.500G", 1_500_000_000}, {"100bits/s", 100}, {"7bit", 7}, {"18446744073709551615", 1<<64 - 1},
	} {
		got, err := ParseBitRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBitRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, text string }{
		{"", "empty"}, {"M", "want bits per second"}, {"-5M", "want bits per second"}, {"+5M", "want"},
		{"1e9", "want"}, {"100 M", "want"}, {" 100M", "want"}, {"100M ", "want"}, {".5G", "want"}, {"5.G", "want"},
		{"1.2.3M", "want"}, {"100MB", "bytes?"}, {"100MBps", "bytes?"}, {"100Mbyte", "bytes?"}, {"100B", "bytes?"},
		{"100Mi", "binary prefixes"}, {"100Mibit", "binary prefixes"}, {"1.5", "not a whole number"},
		{"1.0001k", "not a whole number"}, {"18446744073709551616", "too large"}, {"100000000T", "too large"},
		{"100Mbits/sec", "want"}, {"100MBIT", "want"}, {"100P", "want"}, {strings.Repeat("1", 65), "longer than 64"},
	} {
		if got, err := ParseBitRate(tc.in); err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("ParseBitRate(%q) = %d, %v; want an error saying %q", tc.in, got, err, tc.text)
		}
	}
	for v, want := range map[uint64]string{0: "0bit/s", 999: "999bit/s", 1000: "1kbit/s", 100_000_000: "100Mbit/s",
		1_500_000_000: "1.5Gbit/s", 100_000_001: "100.000001Mbit/s", MaxBandwidth: "10Tbit/s"} {
		if got := FormatBitRate(v); got != want {
			t.Errorf("FormatBitRate(%d) = %q, want %q", v, got, want)
		}
	}
}

// FuzzParseBitRate: the parser never panics, and whatever FormatBitRate
// writes reads back to the same value.
func FuzzParseBitRate(f *testing.F) {
	for _, s := range []string{"100M", "1.5G", "10Mbit", "250kbps", "0", "1.0001k", "100MB", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseBitRate(s)
		if err != nil {
			return
		}
		back, err := ParseBitRate(FormatBitRate(v))
		if err != nil || back != v {
			t.Fatalf("%q = %d, formatted %q, read back %d, %v", s, v, FormatBitRate(v), back, err)
		}
	})
}

// TestBandwidthPackageIPv6: a package holds IPv6 EIPs beside IPv4 ones
// (issue 21), checked against the state as IPv4's are: the EIP exists,
// belongs to one package, is not deleted while listed.
func TestBandwidthPackageIPv6(t *testing.T) {
	s := region6(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	if err := put(&EIP{Address: addr("2001:db8:a::7"), Binding: &Binding{Host: "h1", Guest: "g1"}}); err != nil {
		t.Fatal(err)
	}
	pkg := func(name string, eips ...string) *BandwidthPackage {
		p := &BandwidthPackage{Name: name, Capacity: 100_000_000}
		for _, a := range eips {
			p.EIPs = append(p.EIPs, PackageEIP{Address: addr(a)})
		}
		return p
	}
	wantErr(t, put(pkg("a", "2001:db8:a::9")), "eips[0].address", "2001:db8:a::9 is not an EIP")
	if err := put(pkg("a", "198.51.100.7", "2001:db8:a::7")); err != nil {
		t.Fatalf("a package with an IPv6 EIP refused: %v", err)
	}
	if p, ok := s.PackageOf(addr("2001:db8:a::7")); !ok || p != "a" {
		t.Fatalf("PackageOf(2001:db8:a::7) = %q, %v", p, ok)
	}
	wantErr(t, put(pkg("b", "2001:db8:a::7")), "eips[0].address", "EIP 2001:db8:a::7 already belongs to bandwidth package a")
	if _, err := s.Delete(KindEIP, "2001:db8:a::7"); err == nil || !strings.Contains(err.Error(), "belongs to bandwidth package a") {
		t.Fatalf("deleting an IPv6 EIP a package lists: %v", err)
	}
}
