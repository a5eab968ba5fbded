package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestDeleteEIPsErrorsCapped: a selection whose EIPs cannot be deleted
// answers with the first maxDeleteErrors of them and the count of the
// rest, not one error per EIP; nothing is deleted.
func TestDeleteEIPsErrorsCapped(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	const n = 50
	doc := &model.Document{}
	for i := range n {
		a := netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", 100+i))
		doc.EIPs = append(doc.EIPs, model.EIP{Address: a})
		doc.Quarantines = append(doc.Quarantines, model.Quarantine{Address: a, Reason: "test"})
	}
	if _, err := c.Apply(ctx, doc, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeleteEIPs(ctx, EIPFilter{Prefix: netip.MustParsePrefix("198.51.100.96/27")}) // .96-.127: 28 of them quarantined
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("DeleteEIPs: %v, want an InvalidError", err)
	}
	if len(ie.Fields) != maxDeleteErrors {
		t.Fatalf("%d field errors, want %d: %v", len(ie.Fields), maxDeleteErrors, err)
	}
	if !strings.Contains(ie.Msg, "28 of the selected EIPs") || !strings.Contains(ie.Msg, "8 more not listed") {
		t.Fatalf("message %q: want the total (28) and the unlisted count (8)", ie.Msg)
	}
	if _, _, _, err := c.Get(model.KindEIP, "198.51.100.100"); err != nil {
		t.Fatalf("an EIP was deleted: %v", err)
	}
	// A selection of few failures lists them all and says nothing more.
	_, err = c.DeleteEIPs(ctx, EIPFilter{Prefix: netip.MustParsePrefix("198.51.100.144/29")}) // .144-.149 quarantined: 6
	if !errors.As(err, &ie) || len(ie.Fields) != 6 || strings.Contains(ie.Msg, "not listed") {
		t.Fatalf("DeleteEIPs of 6: %v", err)
	}
}
