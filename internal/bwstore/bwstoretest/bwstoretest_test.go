package bwstoretest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
)

func TestRedis(t *testing.T) {
	r, srv := Redis(t)
	ctx := context.Background()
	e := netip.MustParseAddr("198.51.100.1")
	if err := r.WriteReports(ctx, "az1", "h1", time.Second, []bwstore.Rate{{EIP: e, Dir: bwstore.Egress, BytesPerSec: 5}}); err != nil {
		t.Fatal(err)
	}
	s, err := r.ReadReports(ctx, "az1")
	if err != nil || len(s.Reports) != 1 || s.Reports[0].BytesPerSec != 5 {
		t.Fatalf("%+v %v", s, err)
	}
	if srv.PID <= 0 || srv.Socket == "" {
		t.Errorf("server %+v", srv)
	}
}
