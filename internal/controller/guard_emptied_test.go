package controller

import (
	"context"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestGuardEdgeSetEmptied: removing every edge of a set that has a
// serving one takes it out of service as draining them all does.
func TestGuardEdgeSetEmptied(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	o, _, _, _ := c.Get(model.KindEdgeSet, "pop-a")
	set := *o.(*model.EdgeSet)
	if serving(&set) == 0 {
		t.Fatal("the fixture's pop-a has no serving edge")
	}
	set.Edges = nil
	before := c.Revision()
	_, err := c.Replace(ctx, "pop-a", IfMatch{}, &set)
	refused(t, c, before, err, `edge set "pop-a" would have no serving edge`)
	if _, err := c.Replace(forced, "pop-a", IfMatch{}, &set); err != nil {
		t.Errorf("forced: %v", err)
	}
}
