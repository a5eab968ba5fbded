package controller

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStatusPageBasicPathTricks: Basic credentials accepted on /ui only
// cannot reach another route through a path that starts with /ui but
// names another route once cleaned or decoded (dot segments, escaped
// dots and slashes, an absolute-form request line, a method override
// header): every such request is redirected, not found, refused or
// unauthorized, never served.
func TestStatusPageBasicPathTricks(t *testing.T) {
	s := startServer(t, Config{})
	auth := basic("admin", s.Token())
	for _, line := range []string{
		"GET /ui/../v1/status",
		"GET /ui/./../v1/export",
		"GET /ui/%2e%2e/v1/status",
		"GET /ui/%2E%2E/v1/export",
		"GET /%75i/../v1/status",
		"GET /ui/..%2fv1/status",
		"GET /ui%2f..%2fv1/status",
		"GET /ui/..;/v1/status",
		"GET //ui/../v1/status",
		"GET /ui/../v1/audit",
		"GET http://" + s.Addr() + "/ui/../v1/status",
		"HEAD /ui/../v1/export",
		"POST /ui/../v1/azs",
		"DELETE /ui/../v1/quarantines/198.51.100.8",
	} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req := line + " HTTP/1.1\r\nHost: " + s.Addr() + "\r\nAuthorization: " + auth +
			"\r\nX-HTTP-Method-Override: GET\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		method, _, _ := strings.Cut(line, " ")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 300 {
			t.Errorf("%s with Basic credentials: HTTP %d, want a redirect or a refusal", line, resp.StatusCode)
		}
		if loc := resp.Header.Get("Location"); loc != "" && strings.HasPrefix(loc, "/ui") {
			t.Errorf("%s: redirected to %s", line, loc)
		}
		t.Logf("%s: %d %s", line, resp.StatusCode, resp.Header.Get("Location"))
	}
}
