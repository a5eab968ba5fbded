package store

import (
	"strings"
	"testing"
)

// TestParseAnnounce: the key names the set and the edge, the value must
// agree; anything else is refused with the key in the error.
func TestParseAnnounce(t *testing.T) {
	good := `{"set":"pop-a","edge":"edge-a1","underlay":"198.18.0.1","prefixes":["198.51.100.0/24"]}`
	for _, c := range []struct {
		key, value, err string
	}{
		{AnnounceKey("pop-a", "edge-a1"), good, ""},
		{AnnounceKey("pop-b", "edge-a1"), good, "names set"},
		{AnnounceKey("pop-a", "edge-a2"), good, "names set"},
		{AnnounceRoot + "pop-a", good, "not a"},
		{AnnounceRoot + "pop-a/edge-a1/x", good, "not a"},
		{AnnounceRoot + "/edge-a1", good, "not a"},
		{"/azgate/other/pop-a/edge-a1", good, "not a"},
		{AnnounceKey("pop-a", "edge-a1"), `{"set":`, "unexpected end"},
		{AnnounceKey("pop-a", "edge-a1"), `{"set":"pop-a","edge":"edge-a1","underlay":"nope"}`, "nope"},
		{AnnounceKey("pop-a", "edge-a1"), `"` + strings.Repeat("x", 70000) + `"`, "bytes"},
	} {
		a, err := ParseAnnounce(c.key, []byte(c.value))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.key, err)
		case c.err == "" && (a.Set != "pop-a" || a.Edge != "edge-a1" || a.Underlay.String() != "198.18.0.1" || len(a.Prefixes) != 1):
			t.Errorf("%s: %+v", c.key, a)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %.40s: error %v, want %q", c.key, c.value, err, c.err)
		}
	}
}
