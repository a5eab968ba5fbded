package model

import "testing"

// TestValidateLimits: an EIP's and a service's limits, each error naming
// its field.
func TestValidateLimits(t *testing.T) {
	eip := func(l *Limits) EIP { return EIP{Address: addr("198.51.100.7"), Limits: l} }
	for _, tc := range []struct {
		name string
		e    EIP
		want []string
	}{
		{"none", eip(nil), nil},
		{"per source", eip(&Limits{SourcePPS: 1000, SourceBurst: 2000}), nil},
		{"SYN guard, default burst", eip(&Limits{SYNRate: 500}), nil},
		{"both", eip(&Limits{SourcePPS: 1000, SYNRate: 500, SYNBurst: 50}), nil},
		{"empty block", eip(&Limits{}), []string{"limits~sets no limit"}},
		{"burst without its rate", eip(&Limits{SYNRate: 5, SourceBurst: 10}), []string{"limits.sourceBurst~without sourcePps"}},
		{"rate too high", eip(&Limits{SourcePPS: MaxLimitRate + 1}), []string{"limits.sourcePps~at most"}},
		{"burst too high", eip(&Limits{SYNRate: 1, SYNBurst: MaxLimitRate + 1}), []string{"limits.synBurst~at most"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.e.Validate(), tc.want) })
	}
	s := webService()
	s.Limits = &Limits{SYNBurst: 3}
	checkErrors(t, s.Validate(), []string{"limits~sets no limit", "limits.synBurst~without synRate"})
	s.Limits = &Limits{SYNRate: 100}
	checkErrors(t, s.Validate(), nil)
	if c := s.Clone(); c.Limits == s.Limits || *c.Limits != *s.Limits {
		t.Fatal("Clone shares or loses the limits")
	}
}

// TestDecodeLimits: the JSON names, and unknown ones refused.
func TestDecodeLimits(t *testing.T) {
	o, err := Decode(KindEIP, []byte(`{"address": "198.51.100.7", "limits": {"sourcePps": 100, "sourceBurst": 200, "synRate": 10, "synBurst": 20}}`))
	if err != nil {
		t.Fatal(err)
	}
	if l := o.(*EIP).Limits; l == nil || *l != (Limits{SourcePPS: 100, SourceBurst: 200, SYNRate: 10, SYNBurst: 20}) {
		t.Fatalf("limits %+v", l)
	}
	if _, err := Decode(KindEIP, []byte(`{"address": "198.51.100.7", "limits": {"pps": 100}}`)); err == nil {
		t.Fatal("unknown limits field accepted")
	}
}
