package controller

import (
	"context"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestGuardVIPChangeGSLB: moving a service off a VIP a GSLB record
// targets leaves the record answering with an address that serves
// nothing, as deleting the service would: refused without force too.
func TestGuardVIPChangeGSLB(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	o, _, _, _ := c.Get(model.KindService, "web")
	svc := o.(*model.Service).Clone()
	svc.Name, svc.VIP = "geo", netip.MustParseAddr("198.51.100.10") // w.example.com's target
	if _, err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	moved := svc.Clone()
	moved.VIP = netip.MustParseAddr("198.51.100.11")
	before := c.Revision()
	_, err := c.Replace(ctx, "geo", IfMatch{}, moved)
	refused(t, c, before, err, `the VIP 198.51.100.10 of service "geo" is a target of GSLB record(s) w.example.com`)
	if _, err := c.Replace(forced, "geo", IfMatch{}, moved); err != nil {
		t.Errorf("forced: %v", err)
	}
}
