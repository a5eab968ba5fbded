//go:build !node

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/model"
)

// startController runs a controller (embedded etcd) for the CLI to talk to.
func startController(t *testing.T) *controller.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// azgate runs the CLI in-process against s, with stdin.
func azgate(t *testing.T, s *controller.Server, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--api", s.URL(), "--token-file", s.TokenFile()}, args...))
	err := root.Execute()
	return out.String(), err
}

// must runs the CLI and fails the test on an error.
func must(t *testing.T, s *controller.Server, args ...string) string {
	t.Helper()
	out, err := azgate(t, s, "", args...)
	if err != nil {
		t.Fatalf("azgate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestCLI(t *testing.T) {
	s := startController(t)

	out := must(t, s, "apply", "-f", "testdata/region.yaml")
	if !strings.Contains(out, "9 created, 0 updated, 0 unchanged") || strings.Count(out, "created") != 10 {
		t.Errorf("apply output:\n%s", out)
	}
	out = must(t, s, "apply", "-f", "testdata/region.yaml")
	if strings.Count(out, "unchanged") != 10 { // 9 objects and the summary
		t.Errorf("second apply output:\n%s", out)
	}

	t.Run("eip", func(t *testing.T) {
		out := must(t, s, "eip", "create", "198.51.100.20", "--description", "new")
		if !strings.Contains(out, "EIP 198.51.100.20 created (revision") {
			t.Errorf("output %q", out)
		}
		out = must(t, s, "eip", "get", "198.51.100.20")
		if !strings.Contains(out, "(unbound)") || !strings.Contains(out, "new") {
			t.Errorf("eip get:\n%s", out)
		}
	})

	t.Run("host", func(t *testing.T) {
		out := must(t, s, "host", "create", "az1-h2", "--az", "az1", "--underlay", "198.18.1.2",
			"--guest", "name=g1,address=198.19.1.21,vsid=5001", "--guest", "name=g2,address=198.19.1.22,vsid=5001")
		if !strings.Contains(out, "host az1-h2 created") {
			t.Errorf("output %q", out)
		}
		must(t, s, "host", "guest", "add", "az2-h2", "--name", "g1", "--address", "198.19.2.21", "--vsid", "5002")
		out = must(t, s, "host", "get", "az2-h2")
		if !strings.Contains(out, "198.19.2.21") || !strings.Contains(out, "az2") {
			t.Errorf("host get:\n%s", out)
		}
		out = must(t, s, "host", "list")
		if !strings.Contains(out, "az1-h2") || !strings.Contains(out, "g1,g2") {
			t.Errorf("host list:\n%s", out)
		}
	})

	t.Run("bind and list", func(t *testing.T) {
		out := must(t, s, "eip", "bind", "198.51.100.8", "--host", "az2-h2", "--guest", "g1")
		if !strings.Contains(out, "bound to az2-h2/g1") {
			t.Errorf("bind output %q", out)
		}
		var eips []model.EIP
		if err := json.Unmarshal([]byte(must(t, s, "eip", "list", "--json")), &eips); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range eips {
			found = found || (e.Address.String() == "198.51.100.8" && e.Binding != nil && e.Binding.Host == "az2-h2")
		}
		if len(eips) != 4 || !found {
			t.Errorf("eip list --json: %+v", eips)
		}
		// A second EIP on the same guest is refused, naming the field.
		_, err := azgate(t, s, "", "eip", "bind", "198.51.100.7", "--host", "az2-h2", "--guest", "g1")
		if err == nil || !strings.Contains(err.Error(), "binding.guest") || !strings.Contains(err.Error(), "198.51.100.8") {
			t.Errorf("double bind: %v", err)
		}
		// Removing the bound guest is refused; after unbinding it works.
		if _, err := azgate(t, s, "", "host", "guest", "remove", "az2-h2", "g1"); err == nil || !strings.Contains(err.Error(), "unbind") {
			t.Errorf("removing a bound guest: %v", err)
		}
		out = must(t, s, "eip", "unbind", "198.51.100.8")
		if !strings.Contains(out, "unbound") {
			t.Errorf("unbind output %q", out)
		}
		must(t, s, "host", "guest", "remove", "az2-h2", "g1")
	})

	t.Run("az and set", func(t *testing.T) {
		must(t, s, "az", "create", "az3", "--region", "r1", "--description", "third")
		var az model.AZ
		if err := json.Unmarshal([]byte(must(t, s, "az", "get", "az3", "--json")), &az); err != nil || az.Description != "third" {
			t.Errorf("az get --json: %+v, %v", az, err)
		}
		must(t, s, "edgeset", "create", "pop-b", "--prefix", "192.0.2.0/24", "--edge", "name=edge-b1,underlay=198.18.0.11")
		out := must(t, s, "set", "list")
		if !strings.Contains(out, "pop-b") || !strings.Contains(out, "192.0.2.0/24") || !strings.Contains(out, "edge-b1") {
			t.Errorf("set list:\n%s", out)
		}
		must(t, s, "set", "delete", "pop-b")
		must(t, s, "az", "delete", "az3")
		if _, err := azgate(t, s, "", "az", "get", "az3"); err == nil || !strings.Contains(err.Error(), `AZ "az3" not found`) {
			t.Errorf("get after delete: %v", err)
		}
	})

	t.Run("apply errors", func(t *testing.T) {
		out, err := azgate(t, s, "", "apply", "-f", "testdata/bad.yaml")
		if err == nil {
			t.Fatalf("bad document applied:\n%s", out)
		}
		for _, want := range []string{`hosts[0].az: AZ "az9" does not exist`, `eips[0].binding.host: host "az3-h1" does not exist`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if _, err := azgate(t, s, "", "az", "get", "az3"); err == nil {
			t.Error("az3 of the bad document was written")
		}
		_, err = azgate(t, s, "eips:\n  - address: 198.51.100.400\n", "apply", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "eips[0].address") {
			t.Errorf("bad address from stdin: %v", err)
		}
	})

	t.Run("apply stdin json", func(t *testing.T) {
		out, err := azgate(t, s, `{"eips": [{"address": "198.51.100.60"}]}`, "apply", "-f", "-", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var res struct{ Created int }
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Created != 1 {
			t.Errorf("apply --json: %q, %v", out, err)
		}
	})

	t.Run("status", func(t *testing.T) {
		ns := model.NodeStatus{Role: "edge", Name: "edge-a1", AppliedRevision: 9, Interfaces: []string{"ext0", "ul0"}, Routes: 3,
			Updated: time.Now(), Counters: map[string]model.Count{"encap_tx": {Packets: 11}, "drop_ip_bad": {Packets: 2}, "drop_gre_bad": {Packets: 1}}}
		b, _ := json.Marshal(ns)
		if _, err := s.Store().Client.Put(context.Background(), "/azgate/status/edge/edge-a1", string(b)); err != nil {
			t.Fatal(err)
		}
		out := must(t, s, "status")
		if !strings.Contains(out, "embedded store") {
			t.Errorf("status:\n%s", out)
		}
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "edge ") {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) != 11 || f[1] != "edge-a1" || f[3] != "ext0,ul0" || f[7] != "11" || f[9] != "3" {
			t.Errorf("node row %q in:\n%s", line, out)
		}
		var st struct{ Nodes map[string][]model.NodeStatus }
		if err := json.Unmarshal([]byte(must(t, s, "status", "--json")), &st); err != nil || len(st.Nodes["edge"]) != 1 {
			t.Errorf("status --json: %+v, %v", st, err)
		}
	})
}

func TestCLIErrors(t *testing.T) {
	s := startController(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"host", "create", "h1", "--az", "az1", "--underlay", "198.18.1.1", "--guest", "name=g1,adress=198.19.1.1,vsid=5001"}, `unknown key "adress"`},
		{[]string{"host", "create", "h1", "--az", "az1", "--underlay", "198.18.1.1", "--guest", "name=g1,address=198.19.1.1,vsid=x"}, `vsid "x" is not a number`},
		{[]string{"host", "create", "h1", "--az", "az1", "--underlay", "nope"}, `--underlay "nope" is not an IP address`},
		{[]string{"host", "create", "h1", "--az", "az1", "--underlay", "198.18.1.1"}, `az: AZ "az1" does not exist`},
		{[]string{"set", "create", "p", "--prefix", "198.51.100.1/24"}, "host bits set"},
		{[]string{"set", "create", "p", "--prefix", "198.51.100.0/24", "--edge", "name=e1"}, `underlay "" is not an IP address`},
		{[]string{"eip", "create", "198.51.100.1"}, "not inside a prefix of any edge set"},
		{[]string{"eip", "create", "x"}, `EIP address "x" is not an IP address`},
		{[]string{"az", "create", "Bad_Name"}, `name: "Bad_Name" is not a valid name`},
		{[]string{"apply", "-f", "testdata/missing.yaml"}, "missing.yaml"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := azgate(t, s, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (output %q), want one saying %q", err, out, tc.want)
			}
		})
	}

	t.Run("no token file", func(t *testing.T) {
		root := newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetArgs([]string{"--api", s.URL(), "--token-file", t.TempDir() + "/token", "az", "list"})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "azgate controller") {
			t.Errorf("missing token file: %v", err)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		f := t.TempDir() + "/token"
		os.WriteFile(f, []byte("not-the-token\n"), 0o600)
		root := newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetArgs([]string{"--api", s.URL(), "--token-file", f, "az", "list"})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "wrong bearer token") ||
			!strings.Contains(err.Error(), "the token sent was read from --token-file "+f) {
			t.Errorf("wrong token: %v (want the server's message and where the CLI read the token)", err)
		}
		t.Setenv("AZGATE_TOKEN_FILE", f)
		root = newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetArgs([]string{"--api", s.URL(), "az", "list"})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "read from $AZGATE_TOKEN_FILE="+f) {
			t.Errorf("wrong token from the environment: %v", err)
		}
	})
}

// groups lists every command of the tree that only groups others.
func groups(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	if c.Annotations[groupAnnotation] != "" {
		out = append(out, c)
	}
	for _, sub := range c.Commands() {
		out = append(out, groups(sub)...)
	}
	return out
}

// TestUnknownSubcommand: a mistyped subcommand of any group fails (exit
// 2) naming what it might have been, instead of printing help and
// exiting 0; the group alone still prints its help.
func TestUnknownSubcommand(t *testing.T) {
	var out, errOut bytes.Buffer
	code := execute(newRoot(), []string{"service", "delet", "web"}, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), `unknown command "delet" for "azgate service"; did you mean "delete"?`) {
		t.Errorf("service delet: exit %d, stderr %q, stdout %q", code, errOut.String(), out.String())
	}
	n := 0
	for _, g := range groups(newRoot()) {
		path := strings.Fields(g.CommandPath())[1:]
		args := append(slices.Clone(path), "no-such-command")
		out.Reset()
		errOut.Reset()
		if code := execute(newRoot(), args, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "unknown command \"no-such-command\"") {
			t.Errorf("azgate %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
		out.Reset()
		if code := execute(newRoot(), path, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Available Commands") {
			t.Errorf("azgate %s: exit %d, output %q", strings.Join(path, " "), code, out.String())
		}
		n++
	}
	if n < 15 {
		t.Errorf("only %d command groups checked", n)
	}
}

// TestJSONErrors: under --json, a failure is a JSON object on stdout with
// a stable code, and nothing on stderr.
func TestJSONErrors(t *testing.T) {
	s := startController(t)
	for _, tc := range []struct {
		args   []string
		code   string
		exit   int
		status int
	}{
		{[]string{"service", "delet", "web"}, "usage", exitUsage, 0},
		{[]string{"eip", "get", "--no-such-flag", "x"}, "usage", exitUsage, 0},
		{[]string{"az", "get", "az9"}, "not_found", exitError, 404},
		{[]string{"az", "create", "Bad_Name"}, "invalid", exitError, 422},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"--api", s.URL(), "--token-file", s.TokenFile(), "--json"}, tc.args...)
		exit := execute(newRoot(), args, &out, &errOut)
		var e errorJSON
		if err := json.Unmarshal(out.Bytes(), &e); err != nil || e.Code != tc.code || e.Exit != tc.exit || exit != tc.exit || e.Status != tc.status || e.Error == "" || errOut.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q (%v), stderr %q; want code %q exit %d status %d", tc.args, exit, out.String(), err, errOut.String(), tc.code, tc.exit, tc.status)
		}
	}
}
