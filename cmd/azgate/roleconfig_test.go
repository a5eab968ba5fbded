//go:build !node

package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/azgate/azgate/internal/roleconfig"
)

// runAzgate runs azgate in-process and returns its output and error.
func runAzgate(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func writeTemp(t *testing.T, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigDocsCurrent: docs/config.md and packaging/etc/azgate/*.yaml
// are what `make config-docs` writes from the roles' flags today.
func TestConfigDocsCurrent(t *testing.T) {
	var want bytes.Buffer
	writeConfigReference(&want)
	got, err := os.ReadFile("../../docs/config.md")
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("docs/config.md differs from the roles' flags (err %v): run make config-docs and commit", err)
	}
	for _, c := range roleCommands() {
		var want bytes.Buffer
		writeDefaultConfig(&want, c)
		p := "../../packaging/etc/azgate/" + c.Name() + ".yaml"
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s differs from the role's flags (err %v): run make config-docs and commit", p, err)
		}
	}
	if n := len(roleCommands()); n != len(roles) {
		t.Fatalf("%d role commands for %d roles", n, len(roles))
	}
}

var commentedKey = regexp.MustCompile(`(?m)^#([a-z0-9-]+: .*)$`)

// TestDefaultConfigFiles: each default file is a valid config as shipped
// (every line commented), and with every line uncommented (the defaults
// and the site examples are values the flags take). --check-config on it
// names the site data that is missing, and passes once that is given.
func TestDefaultConfigFiles(t *testing.T) {
	token := writeTemp(t, "token", "0123456789abcdef0123456789abcdef\n", 0o600)
	for _, c := range roleCommands() {
		role := c.Name()
		path := "../../packaging/etc/azgate/" + role + ".yaml"
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := roleconfig.Parse(path, c.Flags(), configOptions(c)); err != nil || len(e) != 0 {
			t.Errorf("%s as shipped: %d settings, error %v (want none)", role, len(e), err)
		}
		all := commentedKey.ReplaceAllString(string(text), "$1")
		allPath := writeTemp(t, role+"-all.yaml", all, 0o644)
		fresh := roleCommands()
		var rc = fresh[0]
		for _, x := range fresh {
			if x.Name() == role {
				rc = x
			}
		}
		entries, err := roleconfig.Parse(allPath, rc.Flags(), configOptions(rc))
		if err == nil {
			err = roleconfig.Apply(allPath, rc.Flags(), entries)
		}
		if err != nil || len(entries) != len(settableFlags(rc)) {
			t.Errorf("%s, every line uncommented: %d of %d keys, error %v", role, len(entries), len(settableFlags(rc)), err)
		}

		out, err := runAzgate(role, "--config", path, "--check-config")
		sd := siteData[role]
		if len(sd) == 0 {
			if err != nil || out != "ok\n" {
				t.Errorf("%s --check-config on the default file: %q, %v (want ok)", role, out, err)
			}
			continue
		}
		named := false
		for _, k := range sd {
			named = named || err != nil && strings.Contains(err.Error(), "--"+k.key)
		}
		if !named || !strings.Contains(err.Error(), "configuration check failed") || out == "ok\n" {
			t.Errorf("%s --check-config without site data: %q, %v (want an error naming a site key)", role, out, err)
		}
		// The site lines uncommented; token files on the command line,
		// which wins over the file's example path.
		site := string(text)
		for _, k := range sd {
			site = strings.Replace(site, "#"+k.key+": ", k.key+": ", 1)
		}
		sitePath := writeTemp(t, role+"-site.yaml", site, 0o644)
		args := []string{role, "--config", sitePath, "--check-config"}
		for _, k := range sd {
			if strings.HasSuffix(k.key, "-file") {
				args = append(args, "--"+k.key, token)
			}
		}
		out, err = runAzgate(args...)
		if err != nil || out != "ok\n" {
			t.Errorf("%s --check-config with the site data: %q, %v (want ok)", role, out, err)
		}
	}
}

// TestConfigFileErrors: a file's mistakes are refused by the role with
// the file, the line, the key and a suggestion; the command line wins.
func TestConfigFileErrors(t *testing.T) {
	p := writeTemp(t, "edge.yaml", "name: e1\nattach: [eth0]\netcd-endpoint: unix:///x\nscope: az\napi: http://x\nhash-seed: \"7\"\nlog-level: loud\n", 0o644)
	out, err := runAzgate("edge", "--config", p, "--check-config")
	if err == nil || out == "ok\n" {
		t.Fatalf("a bad file passed: %q", out)
	}
	for _, w := range []string{
		p + `:3: unknown key "etcd-endpoint" (did you mean "etcd-endpoints"?)`,
		p + `:4: unknown key "scope"`, // bwmgr's, not the edge's
		p + `:5: unknown key "api"`,   // the CLI's
		p + `:6: key "hash-seed": want an integer, not str "7"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	// A value only the role refuses, and the command line over the file.
	p = writeTemp(t, "edge.yaml", "name: e1\nattach: [eth0]\nlog-level: loud\n", 0o644)
	if _, err := runAzgate("edge", "--config", p, "--check-config"); err == nil || !strings.Contains(err.Error(), "--log-level \"loud\"") {
		t.Fatalf("log-level loud: %v", err)
	}
	if out, err := runAzgate("edge", "--config", p, "--check-config", "--log-level", "warn"); err != nil || out != "ok\n" {
		t.Fatalf("--log-level over the file's: %q, %v", out, err)
	}
	// A role's own file checks: a token file others may read.
	tok := writeTemp(t, "tok", "0123456789abcdef0123456789abcdef\n", 0o644)
	p = writeTemp(t, "pathd.yaml", "listen: 127.0.0.1:7090\nregion: r1\ntoken-file: "+tok+"\n", 0o644)
	if _, err := runAzgate("pathd", "--config", p, "--check-config"); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("pathd with a world-readable token: %v", err)
	}
	// A check of the role's own package (gslbrole.Config.Check).
	p = writeTemp(t, "gslb.yaml", "rrl-slip: -3\n", 0o644)
	if _, err := runAzgate("gslb", "--config", p, "--check-config"); err == nil || !strings.Contains(err.Error(), "--rrl-slip -3") {
		t.Fatalf("gslb with a negative slip: %v", err)
	}
	p = writeTemp(t, "bwmgr.yaml", "scope: region\nregion-store: \"mem:\"\ninterval: 2m\n", 0o644)
	if _, err := runAzgate("bwmgr", "--config", p, "--check-config"); err == nil || !strings.Contains(err.Error(), "interval 2m0s") {
		t.Fatalf("bwmgr with a 2m interval: %v", err)
	}
	// The etcd client's files, checked without connecting.
	p = writeTemp(t, "edge.yaml", "name: e1\nattach: [eth0]\netcd-endpoints: http://127.0.0.1:2379\netcd-user: u\netcd-password-file: "+tok+"\n", 0o644)
	if _, err := runAzgate("edge", "--config", p, "--check-config"); err == nil || !strings.Contains(err.Error(), "--etcd-password-file) has mode 0644") {
		t.Fatalf("edge with a world-readable etcd password: %v", err)
	}
	if _, err := runAzgate("controller", "--check-config", "--data-dir", t.TempDir(), "--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-cacert", filepath.Join(t.TempDir(), "none.pem")); err == nil || !strings.Contains(err.Error(), "--etcd-cacert") {
		t.Fatalf("controller with a missing etcd CA: %v", err)
	}
	if _, err := runAzgate("edge", "--config", filepath.Join(t.TempDir(), "none.yaml"), "--check-config"); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Fatalf("a missing file: %v", err)
	}
}

// TestCheckConfigOpensNothing: --check-config of roles whose settings
// point at a listener connects to none of them and binds no address (the
// check passes with the listen address in use).
func TestCheckConfigOpensNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	token := writeTemp(t, "token", "0123456789abcdef0123456789abcdef\n", 0o600)
	for _, args := range [][]string{
		{"controller", "--data-dir", t.TempDir(), "--listen", addr},
		{"controller", "--data-dir", t.TempDir(), "--etcd-endpoints", "http://" + addr},
		{"edge", "--name", "e1", "--attach", "eth0", "--etcd-endpoints", "http://" + addr, "--bw-store", "redis://" + addr},
		{"agent", "--name", "h1", "--underlay-if", "eth1", "--etcd-endpoints", "http://" + addr},
		{"bwmgr", "--scope", "region", "--region-store", "redis://" + addr, "--etcd-endpoints", "http://" + addr},
		{"gslb", "--listen", addr, "--etcd-endpoints", "http://" + addr},
		{"pathd", "--listen", addr, "--region", "r1", "--token-file", token, "--redis", "redis://" + addr},
		{"prober", "--node", "e1", "--relay", "r1=" + addr, "--report-url", "http://" + addr + "/v1/reports", "--token-file", token},
		{"announce", "--vip", "192.0.2.53", "--asn", "64512", "--next-hop", "192.0.2.11", "--peer", "127.0.0.1", "--check", "tcp://" + addr, "--status-listen", addr},
	} {
		out, err := runAzgate(append(args, "--check-config", "--log-level", "error")...)
		if err != nil || out != "ok\n" {
			t.Errorf("%v: %q, %v", args, out, err)
		}
	}
	if n := pendingConns(t, ln.(*net.TCPListener)); n != 0 {
		t.Fatalf("--check-config made %d connections to the listener", n)
	}
	// The count sees a connection (the check above can fail).
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := pendingConns(t, ln.(*net.TCPListener)); n != 1 {
		t.Fatalf("one connection made, %d counted", n)
	}
}

// pendingConns accepts, without waiting, the connections in ln's queue
// (a connect completes in the kernel before it is accepted) and counts them.
func pendingConns(t *testing.T, ln *net.TCPListener) int {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := syscall.Accept4(int(fd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
			if err != nil {
				return
			}
			syscall.Close(nfd)
			n++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReloadLogLevel: SIGHUP's reload takes log-level from the file,
// keeps the command line's, and keeps the running level on a bad file.
func TestReloadLogLevel(t *testing.T) {
	var level string
	fs := pflag.NewFlagSet("edge", pflag.ContinueOnError)
	fs.StringVar(&level, "log-level", "info", "")
	fs.String("name", "", "")
	o := roleconfig.Options{}
	p := writeTemp(t, "edge.yaml", "name: e1\nlog-level: debug\n", 0o644)
	roleLevel.Set(slog.LevelInfo)
	reload(p, fs, o, nil)
	if roleLevel.Level() != slog.LevelDebug {
		t.Fatalf("after reload: %v, want debug", roleLevel.Level())
	}
	roleLevel.Set(slog.LevelWarn)
	reload(p, fs, o, map[string]bool{"log-level": true})
	if roleLevel.Level() != slog.LevelWarn {
		t.Fatalf("the command line's level was replaced: %v", roleLevel.Level())
	}
	for _, bad := range []string{"log-level: loud\n", "nme: x\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		reload(p, fs, o, nil)
		if roleLevel.Level() != slog.LevelWarn {
			t.Fatalf("%q: level %v, want the running warn", bad, roleLevel.Level())
		}
	}
	if err := os.WriteFile(p, []byte("name: e1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reload(p, fs, o, nil)
	if roleLevel.Level() != slog.LevelInfo {
		t.Fatalf("log-level removed from the file: %v, want the default info", roleLevel.Level())
	}
}

// TestSiteExamplesAreYAML: the site examples in the default files parse
// (they are written into the files verbatim).
func TestSiteExamplesAreYAML(t *testing.T) {
	for role, sd := range siteData {
		for _, k := range sd {
			var v any
			if err := yaml.Unmarshal([]byte(k.example), &v); err != nil {
				t.Errorf("%s %s: %v", role, k.key, err)
			}
		}
	}
}

// TestRoleReloadsOnSIGHUP: a running role (the prober, which needs no
// privilege) takes the file's new log-level on SIGHUP and keeps running
// (without a handler, SIGHUP would end it); SIGTERM still stops it.
func TestRoleReloadsOnSIGHUP(t *testing.T) {
	relay, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	token := writeTemp(t, "token", "0123456789abcdef0123456789abcdef\n", 0o600)
	conf := func(level string) string {
		return "node: e1\nrelay: [r1=" + relay.Addr().String() + "]\nreport-url: http://127.0.0.1:9/v1/reports\n" +
			"token-file: " + token + "\nlog-level: " + level + "\n"
	}
	p := writeTemp(t, "prober.yaml", conf("info"), 0o644)
	cmd := exec.Command(os.Args[0], "prober", "--config", p)
	cmd.Env = append(os.Environ(), "AZGATE_TEST_AS_MAIN=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			for range lines {
			}
			cmd.Wait()
		}
	}()
	waitFor := func(what string) string {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the prober exited before logging %q", what)
				}
				if strings.Contains(l, what) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q logged in a minute", what)
			}
		}
	}
	waitFor("prober running")
	if err := os.WriteFile(p, []byte(conf("debug")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := waitFor("SIGHUP: reloaded log-level"); !strings.Contains(l, "log-level=DEBUG") {
		t.Fatalf("reloaded to the wrong level: %s", l)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines { // until it exits
	}
	waited = true
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGHUP and SIGTERM: %v", err)
	}
}

// The flags that became repeatable take a list in a file, or one string
// as the files written for the single value did: gslb's and pathd's
// listen, announce's vip (a dual-stack pair).
func TestConfigRepeatableListen(t *testing.T) {
	tok := writeTemp(t, "tok", "0123456789abcdef0123456789abcdef\n", 0o600)
	for _, tc := range []struct {
		role, file, err string
	}{
		{"gslb", "listen: 127.0.0.1:5353\n", ""},
		{"gslb", "listen: [127.0.0.1:5353, \"[::1]:5353\"]\n", ""},
		{"gslb", "listen: [127.0.0.1:5353, 127.0.0.1:5353]\n", `--listen "127.0.0.1:5353": given twice`},
		{"gslb", "listen: [127.0.0.1]\n", `--listen "127.0.0.1": address 127.0.0.1: missing port`},
		{"pathd", "listen: 192.0.2.10:7090\nregion: r1\ntoken-file: " + tok + "\n", ""},
		{"pathd", "listen: [192.0.2.10:7090, \"[2001:db8::10]:7090\"]\nregion: r1\ntoken-file: " + tok + "\n", ""},
		{"pathd", "listen: [\"[::1]:7090\", \"[::1]:7090\"]\nregion: r1\ntoken-file: " + tok + "\n", `--listen "[::1]:7090": given twice`},
		{"announce", "vip: 192.0.2.53/32\nasn: 64512\nnext-hop: 192.0.2.11\npeer: [192.0.2.1]\ncheck: [tcp://127.0.0.1:6379]\n", ""},
		{"announce", "vip: [192.0.2.53/32, 2001:db8::53/128]\nasn: 64512\nnext-hop: 192.0.2.11\nnext-hop6: 2001:db8::11\npeer: [\"[2001:db8::1]:64500\"]\ncheck: [tcp://127.0.0.1:6379]\n", ""},
		{"announce", "vip: [192.0.2.53/32, 2001:db8::53/128]\nasn: 64512\nnext-hop: 192.0.2.11\npeer: [192.0.2.1]\ncheck: [tcp://127.0.0.1:6379]\n", "--next-hop6 is required with an IPv6 --vip"},
	} {
		p := writeTemp(t, tc.role+".yaml", tc.file, 0o600)
		args := []string{tc.role, "--config", p, "--check-config", "--log-level", "error"}
		if tc.role == "gslb" {
			args = append(args, "--etcd-endpoints", "http://127.0.0.1:1")
		}
		out, err := runAzgate(args...)
		if tc.err == "" && (err != nil || out != "ok\n") {
			t.Errorf("%s %q: %q, %v", tc.role, tc.file, out, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %q: %v, want %q", tc.role, tc.file, err, tc.err)
		}
	}
}
