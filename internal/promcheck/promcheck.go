// Package promcheck checks Prometheus exposition and rules with promtool
// (Debian's prometheus package; scripts/setup.sh installs it). Tests use
// it: each role's test scrapes the role's real /metrics and lints it
// (docs/observability.md, Metrics). Nothing in the shipped binary imports
// it.
package promcheck

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Promtool returns promtool's path, skipping t when it is not installed.
func Promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: no promtool (apt-get install prometheus; scripts/setup.sh installs it)")
	}
	return p
}

// Scrape GETs /metrics from h and returns the body, failing t unless the
// answer is 200.
func Scrape(t testing.TB, h http.Handler) []byte {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return ScrapeURL(t, srv.URL+"/metrics", "")
}

// ScrapeURL GETs url (with a bearer token when token is not empty).
func ScrapeURL(t testing.TB, url, token string) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return body
}

// Lint runs "promtool check metrics" on an exposition and fails t with
// each problem it reports (names, units, HELP, counters without _total...).
func Lint(t testing.TB, exposition []byte) {
	t.Helper()
	if len(bytes.TrimSpace(exposition)) == 0 {
		t.Fatal("empty exposition: nothing to lint")
	}
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v", err)
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			t.Errorf("  %s", l)
		}
	}
}

var sampleRE = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// Names returns the metric names (as sampled: a histogram's _bucket, _sum
// and _count) in an exposition, sorted.
func Names(exposition []byte) []string {
	set := map[string]bool{}
	for _, m := range sampleRE.FindAllSubmatch(exposition, -1) {
		set[string(m[1])] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var (
	stripRE  = regexp.MustCompile(`"[^"]*"|\{[^}]*\}|\[[^\]]*\]`)
	metricRE = regexp.MustCompile(`\bazgate_[a-zA-Z0-9_:]*`)
)

// QueryNames returns the azgate metric names a PromQL expression names:
// identifiers outside strings, label matchers and range selectors.
func QueryNames(q string) []string {
	return metricRE.FindAllString(stripRE.ReplaceAllString(q, " "), -1)
}
