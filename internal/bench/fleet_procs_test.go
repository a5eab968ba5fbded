package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain runs the fleet's agent child when the bench re-executes this
// test binary as `bench fleet fleet-agent ...` (FleetOptions.Binary
// defaults to the running executable).
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "bench" && os.Args[2] == "fleet" && os.Args[3] == FleetAgentChildArg {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := FleetAgentChildMain(ctx, os.Args[4:], os.Stdin, os.Stdout)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseFleetNodeEvent(t *testing.T) {
	ev, err := parseFleetNodeEvent([]byte(`{"event":"loaded","name":"h0","rev":812,"at":1765000000000000000,"load_s":0.41,"eips":1000}`))
	if err != nil || ev.Event != "loaded" || ev.Name != "h0" || ev.Rev != 812 || ev.EIPs != 1000 || ev.LoadS != 0.41 {
		t.Errorf("%+v %v", ev, err)
	}
	ev, err = parseFleetNodeEvent([]byte(`{"event":"usage","name":"h0","rss_mb":21.3,"peak_mb":30.2,"rss_gc_mb":17,"anon_mb":9.5}`))
	if err != nil || ev.RSSMB != 21.3 || ev.PeakMB != 30.2 || ev.RSSGCMB != 17 || ev.AnonMB != 9.5 {
		t.Errorf("%+v %v", ev, err)
	}
	for _, bad := range []string{
		``, `not json`, `{"event":"loaded","name":"h0"}`, `{"event":"applied","rev":3}`,
		`{"event":"usage","name":"h0"}`, `{"event":"what","rev":1,"at":1}`,
		`{"event":"applied","rev":3,"at":1,"extra":1}`, `{"event":"applied","rev":3,"at":1} {}`,
	} {
		if ev, err := parseFleetNodeEvent([]byte(bad)); err == nil {
			t.Errorf("%q: parsed as %+v", bad, ev)
		}
	}
}

func TestFleetBusiestHosts(t *testing.T) {
	per := map[string]int{"h2": 5, "h3": 9, "h0": 1}
	got := fleetBusiestHosts(per, 5, 3)
	if fmt.Sprint(got) != "[h3 h2 h0]" {
		t.Errorf("%v", got)
	}
	if got := fleetBusiestHosts(per, 2, 5); fmt.Sprint(got) != "[h0 h1]" {
		t.Errorf("%v", got)
	}
}
