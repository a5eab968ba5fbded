package controller

import (
	"strings"
	"testing"
)

// TestListContinueInvalid: an EIP list is in address order; a continue
// token that is no address is a bad request, not a silently wrong page.
func TestListContinueInvalid(t *testing.T) {
	s := startServer(t, Config{})
	for _, path := range []string{"/v1/eips?limit=1&continue=nope", "/v1/quarantines?continue=198.51.100"} {
		if r := call(t, s, "GET", path, nil); r.code != 400 || !strings.Contains(r.apiError(t).Error, "continue") {
			t.Errorf("GET %s: HTTP %d %s", path, r.code, r.body)
		}
	}
	if r := call(t, s, "GET", "/v1/eips?limit=1&continue=198.51.100.7", nil); r.code != 200 {
		t.Errorf("a valid token: HTTP %d %s", r.code, r.body)
	}
}
