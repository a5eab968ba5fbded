//go:build !node

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/store"
)

func TestBwmgrFlags(t *testing.T) {
	ok := bwmgrFlags{scope: "az", zone: "az1", storeURL: "unix:///run/r.sock", regionURL: "redis://10.0.0.1:6379", leaseTTL: store.DefaultOwnerTTL, interval: time.Second}
	if err := ok.check(); err != nil {
		t.Fatalf("valid az flags: %v", err)
	}
	reg := bwmgrFlags{scope: "region", regionURL: "redis://10.0.0.1:6379", leaseTTL: time.Second}
	if err := reg.check(); err != nil {
		t.Fatalf("valid region flags: %v", err)
	}
	for _, c := range []struct {
		mod  func(*bwmgrFlags)
		want string
	}{
		{func(f *bwmgrFlags) { f.scope = "" }, `--scope "": want az or region`},
		{func(f *bwmgrFlags) { f.zone = "" }, "needs --zone"},
		{func(f *bwmgrFlags) { f.zone = "region" }, "region tier's name"},
		{func(f *bwmgrFlags) { f.storeURL = "" }, "needs --store"},
		{func(f *bwmgrFlags) { f.regionURL = "" }, "--region-store is required"},
		{func(f *bwmgrFlags) { f.scope = "region" }, "are for --scope az"},
		{func(f *bwmgrFlags) { f.leaseTTL = 500 * time.Millisecond }, "--lease-ttl"},
	} {
		f := ok
		c.mod(&f)
		if err := f.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check() = %v, want %q", err, c.want)
		}
	}
}
