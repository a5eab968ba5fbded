package fleetnode

import (
	"io"
	"strings"
	"testing"
)

func TestParseEvent(t *testing.T) {
	ev, err := ParseEvent([]byte(`{"event":"loaded","name":"h0","rev":812,"at":1765000000000000000,"load_s":0.41,"eips":1000}`))
	if err != nil || ev.Event != "loaded" || ev.Name != "h0" || ev.Rev != 812 || ev.EIPs != 1000 || ev.LoadS != 0.41 {
		t.Errorf("%+v %v", ev, err)
	}
	ev, err = ParseEvent([]byte(`{"event":"usage","name":"h0","rss_mb":21.3,"peak_mb":30.2,"rss_gc_mb":17,"anon_mb":9.5}`))
	if err != nil || ev.RSSMB != 21.3 || ev.PeakMB != 30.2 || ev.RSSGCMB != 17 || ev.AnonMB != 9.5 {
		t.Errorf("%+v %v", ev, err)
	}
	ev, err = ParseEvent([]byte(`{"event":"done","name":"s0-e1","rev":815,"at":1765000000000000000,"seen":1764999999999000000,"early":true,"sum":"9f"}`))
	if err != nil || ev.Seen != 1764999999999000000 || !ev.Early || ev.Sum != "9f" {
		t.Errorf("%+v %v", ev, err)
	}
	if ev, err = ParseEvent([]byte(`{"event":"dropped","name":"s0-e0","fake_maps_mb":21.5}`)); err != nil || ev.FakeMapsMB != 21.5 {
		t.Errorf("%+v %v", ev, err)
	}
	for _, bad := range []string{
		``, `not json`, `{"event":"done","name":"s0-e1","sum":"9f"}`, `{"event":"loaded","name":"h0"}`, `{"event":"applied","rev":3}`,
		`{"event":"usage","name":"h0"}`, `{"event":"what","rev":1,"at":1}`,
		`{"event":"applied","rev":3,"at":1,"extra":1}`, `{"event":"applied","rev":3,"at":1} {}`,
	} {
		if ev, err := ParseEvent([]byte(bad)); err == nil {
			t.Errorf("%q: parsed as %+v", bad, ev)
		}
	}
}

func TestParseCond(t *testing.T) {
	for in, want := range map[string]string{
		"route 100.64.0.1 198.18.0.2": "route 100.64.0.1 198.18.0.2",
		"table web0/web 7":            "table web0/web 7",
		"routes 750":                  "routes 750",
	} {
		c, err := ParseCond(strings.Fields(in))
		if err != nil || c.String() != want {
			t.Errorf("%q: %v %v", in, c, err)
		}
	}
	for _, bad := range []string{"", "route 100.64.0.1", "route x 198.18.0.2", "table web0/web", "table web0/web x", "routes", "routes 1 2", "what 1"} {
		if c, err := ParseCond(strings.Fields(bad)); err == nil {
			t.Errorf("%q: parsed as %v", bad, c)
		}
	}
}

// TestMainCommands: Main refuses no command, an unknown one and a
// child's missing flags, naming what it wants.
func TestMainCommands(t *testing.T) {
	for args, want := range map[string]string{
		"":                      "want a command: fleet-edge or fleet-agent",
		"fleet-node":            `unknown command "fleet-node": want fleet-edge or fleet-agent`,
		"fleet-edge":            "fleet-edge: want --etcd-endpoints and --name",
		"fleet-agent --host h1": "fleet-agent: want --etcd-endpoints and --host",
	} {
		err := Main(t.Context(), strings.Fields(args), strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", args, err, want)
		}
	}
}
