package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/azgate/azgate/packaging"
	"gopkg.in/yaml.v3"
)

// TestRoleCommandIsTheUnits: the lab starts every role with its unit's
// ExecStart and checks it with the unit's --check-config ExecStartPre,
// the binary and the configuration file substituted, and the file holds
// the settings.
func TestRoleCommandIsTheUnits(t *testing.T) {
	l := &Lab{Cfg: Config{StateDir: t.TempDir(), Binary: "/opt/lab/azgate", NodeBinary: "/opt/lab/azgate-node"}}
	for _, role := range []string{"controller", "edge", "agent", "bwmgr", "gslb", "pathd", "prober", "announce"} {
		u, err := packaging.RoleCommand(role)
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.roleCommand("n1-"+role, []string{role, "--log-level", "debug"})
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		path := filepath.Join(l.Cfg.StateDir, "config", "n1-"+role+".yaml")
		// The node roles run azgate-node, as their units do.
		bin := l.Cfg.Binary
		if role == "edge" || role == "agent" {
			bin = l.Cfg.NodeBinary
		}
		sub := func(argv []string) []string {
			out := slices.Clone(argv)
			for i, a := range out {
				out[i] = strings.NewReplacer(packaging.BinaryOf(role), bin, packaging.ConfigFile(role), path).Replace(a)
			}
			return out
		}
		if want := sub(u.Start); !slices.Equal(c.Start, want) {
			t.Errorf("%s: lab starts %q, the unit %q", role, c.Start, want)
		}
		if want := sub(u.Check); !slices.Equal(c.Check, want) {
			t.Errorf("%s: lab checks with %q, the unit %q", role, c.Check, want)
		}
		if want := []string{bin, role, "--config", path}; !slices.Equal(c.Start, want) {
			t.Errorf("%s: lab starts %q, want %q", role, c.Start, want)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil || m["log-level"] != "debug" || len(m) != 1 {
			t.Errorf("%s: file %q (%v), want log-level: debug", role, b, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: file mode %v (%v), want 0600", role, fi.Mode(), err)
		}
	}
	if _, err := l.roleCommand("x", []string{"nosuch"}); err == nil {
		t.Error("a role without a unit got a command")
	}
}

// TestRoleConfig: the flags become keys of the flag's YAML type; list
// flags become lists (comma-separated ones split, repeated ones
// gathered), a repeated scalar keeps its last value, an empty value stays
// an empty string.
func TestRoleConfig(t *testing.T) {
	b, err := roleConfig([]string{"edge", "--name", "e1", "--attach", "ext0,ul0,dmz0", "--icmp-rate", "1000",
		"--health-command", "a=/x y", "--health-command", "b=/z", "--follow-share=false", "--arp-gateway", "",
		"--bw-grace", "2s", "--name", "e2"})
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	got := map[string]string{}
	for i := 0; i < len(m.Content); i += 2 {
		v := m.Content[i+1]
		if v.Kind == yaml.SequenceNode {
			var items []string
			for _, it := range v.Content {
				items = append(items, it.Tag+":"+it.Value)
			}
			got[m.Content[i].Value] = "[" + strings.Join(items, " ") + "]"
		} else {
			got[m.Content[i].Value] = v.Tag + ":" + v.Value
		}
	}
	want := map[string]string{"name": "!!str:e2", "attach": "[!!str:ext0 !!str:ul0 !!str:dmz0]", "icmp-rate": "!!int:1000",
		"health-command": "[!!str:a=/x y !!str:b=/z]", "follow-share": "!!bool:false", "arp-gateway": "!!str:", "bw-grace": "!!str:2s"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	for _, bad := range [][]string{{"edge", "name"}, {"edge", "--name"}, {}} {
		if _, err := roleConfig(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
