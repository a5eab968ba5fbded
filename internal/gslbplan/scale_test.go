package gslbplan

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// TestApplyScale: applying many records to one zone checks each record
// with the zone alone (linear), and a whole-zone check or Build is one
// compile.
func TestApplyScale(t *testing.T) {
	st := model.NewState()
	if _, err := st.Put(zone()); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	start := time.Now()
	for i := range n {
		r := &model.GSLBRecord{Name: fmt.Sprintf("r%d.example.com", i), Zone: "example.com", Policy: model.GSLBNearest,
			Targets: []model.GSLBTarget{{VIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), Region: "eu"}, {VIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Region: "us"}}}
		if _, err := st.Put(r); err != nil {
			t.Fatal(err)
		}
		if err := CheckRecord(st, r); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d records applied one by one with the record check: %v", n, time.Since(start))
	start = time.Now()
	if err := CheckZone(st, "example.com"); err != nil {
		t.Fatal(err)
	}
	p := Build(st)
	if len(p.Records) != n || len(p.Skipped) != 0 {
		t.Fatalf("built %d records, skipped %v", len(p.Records), p.Skipped)
	}
	t.Logf("a zone check and a Build of %d records: %v", n, time.Since(start))
}
