package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// labStatusPage loads the lab controller's status page (/ui) in headless
// Chromium (bin), as a person would, with the lab's token as the Basic
// password, once the lab's edges announce and an EIP is quarantined: the
// DOM Chromium built holds every set and edge of the lab, the quarantined
// /32 the quarantine set took from the prefix set and the caller's
// wants (objects it made); the screenshot is left in the artifact
// directory. The lab's API is a unix socket: the test forwards a loopback
// port to it (a browser reaches no socket), and fetches the page with the
// curl command `lab status` prints. TestLabDashboard runs it on its lab
// (one lab for both: a lab takes ~2 minutes to come up in CI).
func labStatusPage(t *testing.T, l *lab.Lab, bin string, wants ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	const quarantined = "198.51.100.9"
	if _, err := c.Create(ctx, &model.Quarantine{Address: netip.MustParseAddr(quarantined), Reason: "status page test"}); err != nil {
		t.Fatal(err)
	}
	// Until the prefix set's edges announce and the quarantine set's
	// edge took the /32.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		st, err := l.NodeStatuses(ctx)
		ok := err == nil
		for _, e := range []string{"edge-a1", "edge-b1", "edge-q1"} {
			b := st[e].BGP
			ok = ok && b != nil && b.Announcing
		}
		if q := st["edge-q1"].BGP; ok && q != nil && strings.Contains(strings.Join(q.Advertised, " "), quarantined+"/32") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("edges not announcing (quarantine included) after a minute: %v", err)
		}
	}
	view := l.Status(ctx)
	sock := strings.TrimPrefix(view.API, "unix://")
	tok, err := os.ReadFile(view.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))

	// The command lab status prints.
	if curl, err := exec.LookPath("curl"); err == nil {
		out, err := exec.CommandContext(ctx, curl, "-su", "lab:"+token, "--unix-socket", sock, "http://lab/ui").Output()
		if err != nil || !strings.Contains(string(out), "edge-q1") {
			t.Errorf("curl through the socket: %v: %.300s", err, out)
		}
	}

	// A loopback port forwarded to the API's socket, for Chromium.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, conn)
				io.Copy(conn, up)
			}()
		}
	}()
	u := "http://" + url.UserPassword("lab", token).String() + "@" + ln.Addr().String() + "/ui"
	chrome := func(args ...string) []byte {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		all := []string{"--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--no-sandbox",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1600"}
		cmd := exec.CommandContext(cctx, bin, append(append(all, args...), u)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, stderr.Bytes())
		}
		return stdout.Bytes()
	}
	dom := string(chrome("--dump-dom"))
	for _, want := range append([]string{"prefix-ab", "dedicated", "quarantine", "edge-a1", "edge-a2", "edge-b1", "edge-b2", "edge-d1", "edge-q1",
		"announcing", quarantined + "/32 → quarantine (quarantined)", "status page test", "<svg"}, wants...) {
		if !strings.Contains(dom, want) {
			t.Errorf("the lab's status page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("DOM:\n%.4000s", dom)
	}
	shot := filepath.Join(t.TempDir(), "lab.png")
	chrome("--screenshot=" + shot)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(artifactDir(t), "lab-status-page.png")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	checkScreenshot(t, out, 1280, 1600)
	t.Logf("screenshot of the lab's status page: %s", out)
}
