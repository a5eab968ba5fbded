package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// chromium returns a headless Chromium's path, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium-headless-shell", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium-headless-shell or chromium in PATH (scripts/setup.sh installs chromium-headless-shell)")
	return ""
}

// runChromium runs a headless Chromium on url with args, in a process
// group of its own (killed at the end, renderers included), with a fresh
// profile; it returns the standard output.
func runChromium(t *testing.T, bin, u string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := []string{"--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1600"}
	if os.Geteuid() == 0 {
		all = append(all, "--no-sandbox") // Chromium refuses to run its sandbox as root
	}
	all = append(append(all, args...), u)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// artifactDir is where a test leaves files for people to look at:
// $AZGATE_TEST_ARTIFACTS when set, else /tmp/azgate-artifacts.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AZGATE_TEST_ARTIFACTS")
	if dir == "" {
		dir = "/tmp/azgate-artifacts"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStatusPageChromium serves the status page from a real controller
// (embedded etcd) holding a region written through the API — AZs, hosts,
// three edge sets, EIPs bound, pulled out and quarantined, two services,
// a quarantine, a bandwidth package — with edges' and an agent's statuses
// and an edge's health reports in the store, and loads it in headless
// Chromium with Basic credentials in the URL, as a person would. The
// screenshot is a real picture (decoded, the window's size, many
// colours) left in the artifact directory; the DOM Chromium built holds
// the sets, the edges, the backends' health, and no script.
func TestStatusPageChromium(t *testing.T) {
	bin := chromium(t)
	tf := writeTokens(t, t.TempDir(), "viewer read-only viewer-token-0123456789\n")
	s := startServer(t, Config{TokensFile: tf, HealthDebounce: 50 * time.Millisecond, Version: "test"})
	ctx := context.Background()
	if _, err := newClient(s).Apply(ctx, uiDoc(t)); err != nil {
		t.Fatal(err)
	}
	// The nodes publish their statuses, and edge-a1 its health checks'
	// results, with their leases, as the edge and agent roles do.
	cli := s.Store().Client
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for role, nodes := range uiNodes() {
		for _, ns := range nodes {
			b, _ := json.Marshal(ns)
			if _, err := cli.Put(ctx, store.StatusKey(role, ns.Name), string(b), clientv3.WithLease(lease.ID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for backend, up := range map[string]bool{"az1-h1/g1:8080": false, "az1-h2/g1:8080": true} {
		b, _ := json.Marshal(model.HealthReport{Up: up, Since: time.Now().UTC().Truncate(time.Second)})
		if _, err := cli.Put(ctx, model.HealthReportKey("edge-a1", "web", "web", backend), string(b), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		h, err := newClient(s).GetHealth(ctx, "web")
		return err == nil && h.IsDown("web", "az1-h1/g1:8080")
	})

	u := "http://" + url.UserPassword("viewer", "viewer-token-0123456789").String() + "@" + s.Addr() + "/ui"
	dom := string(runChromium(t, bin, u, "--dump-dom"))
	for _, want := range []string{"pop-a", "ded-1", "quarantine", "edge-a1", "edge-a2", "not announcing: dataplane",
		"198.51.100.9/32 → ded-1 (pulled out)", "az1-h1/g1:8080 w1 down", "az1-h2/g1:8080 w1 up", "flood &lt;b&gt;1 Mpps&lt;/b&gt;", "100 Mbit/s", "<svg"} {
		if !strings.Contains(dom, want) {
			t.Errorf("Chromium's DOM lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(dom), "<script") {
		t.Errorf("Chromium's DOM holds a script element")
	}
	if t.Failed() {
		t.Fatalf("DOM:\n%.3000s", dom)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, u, "--screenshot="+shot)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 1600 {
		t.Errorf("screenshot of %v, want 1280x1600", sz)
	}
	if n := colours(img, 64); n < 6 {
		t.Errorf("screenshot of %d distinct colours: blank?", n)
	}
	out := filepath.Join(artifactDir(t), "TestStatusPageChromium.png")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the status page (%d bytes): %s", len(b), out)
}

// colours counts the distinct colours of img, up to limit.
func colours(img image.Image, limit int) int {
	seen := map[uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			seen[cr>>8<<16|cg>>8<<8|cb>>8] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}
