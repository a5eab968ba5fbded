package announce

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/probe"
)

// FuzzParseCheck: a check URL either is refused or becomes a target that
// validates and from which a request can be made (the path and Host go on
// the wire as they are, so they must be clean).
func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{"tcp://127.0.0.1:6379", "http://127.0.0.1:8080/healthz?deep=1", "https://[::1]/", "http://127.0.0.1/a%20b",
		"http://127.0.0.1/%", "http://[fe80::1%25eth0]:80/", "tcp://127.0.0.1:6379/x", "http://127.0.0.1/\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseCheck(s, probe.Spec{Interval: time.Second})
		if err != nil {
			return
		}
		if err := tg.Validate(); err != nil {
			t.Fatalf("ParseCheck(%q) gave an invalid target: %v", s, err)
		}
		if tg.Spec.Kind == probe.TCP {
			return
		}
		if _, err := http.NewRequestWithContext(context.Background(), "GET", string(tg.Spec.Kind)+"://127.0.0.1"+tg.Spec.Path, nil); err != nil {
			t.Fatalf("ParseCheck(%q): path %q makes no request: %v", s, tg.Spec.Path, err)
		}
	})
}
