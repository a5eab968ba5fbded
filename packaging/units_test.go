package packaging

import (
	"slices"
	"testing"
)

// Roles are the roles that have a unit.
var roles = []string{"controller", "edge", "agent", "bwmgr", "gslb", "pathd", "prober", "announce"}

// TestRoleCommand: every unit's command lines are read, the check before
// the start, and With substitutes the binary and the configuration file.
func TestRoleCommand(t *testing.T) {
	for _, r := range roles {
		c, err := RoleCommand(r)
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		got := c.With(r, "/opt/x/azgate", "/run/lab/n1.yaml")
		if want := []string{"/opt/x/azgate", r, "--config", "/run/lab/n1.yaml"}; !slices.Equal(got.Start, want) {
			t.Errorf("%s: start %q, want %q", r, got.Start, want)
		}
		if want := []string{"/opt/x/azgate", r, "--config", "/run/lab/n1.yaml", "--check-config"}; !slices.Equal(got.Check, want) {
			t.Errorf("%s: check %q, want %q", r, got.Check, want)
		}
		if c.Start[0] != BinaryOf(r) || !slices.Contains(c.Start, ConfigFile(r)) {
			t.Errorf("%s: With changed the unit's command %q", r, c.Start)
		}
	}
	if _, err := RoleCommand("nosuch"); err == nil {
		t.Error("a role without a unit has a command")
	}
	// The node roles run azgate-node, the others azgate.
	for r, want := range map[string]string{"edge": NodeBinary, "agent": NodeBinary, "controller": Binary, "gslb": Binary} {
		if c, err := RoleCommand(r); err != nil || c.Start[0] != want || c.Check[0] != want {
			t.Errorf("%s: unit runs %q and checks with %q (%v), want %s", r, c.Start, c.Check, err, want)
		}
	}
}

// TestRoleCommandRefuses: a unit whose command lines the callers cannot
// follow is an error, not a half-followed command.
func TestRoleCommandRefuses(t *testing.T) {
	const check = "ExecStartPre=/usr/bin/azgate-node edge --config /etc/azgate/edge.yaml --check-config\n"
	const start = "ExecStart=/usr/bin/azgate-node edge --config /etc/azgate/edge.yaml\n"
	good := "[Unit]\nExecStart=/bin/false\n[Service]\nExecStartPre=+/usr/bin/install -d /x\n" + check + start
	c, err := parseCommand("edge", good)
	if err != nil || len(c.Start) != 4 || len(c.Check) != 5 {
		t.Fatalf("a good unit: %q, %v", c, err)
	}
	for name, text := range map[string]string{
		"no start":          "[Service]\n" + check,
		"no check":          "[Service]\n" + start,
		"start twice":       "[Service]\n" + check + start + start,
		"another binary":    "[Service]\n" + check + "ExecStart=/usr/local/bin/azgate-node edge --config /etc/azgate/edge.yaml\n",
		"the full binary":   "[Service]\n" + check + "ExecStart=/usr/bin/azgate edge --config /etc/azgate/edge.yaml\n",
		"another role":      "[Service]\n" + check + "ExecStart=/usr/bin/azgate-node agent --config /etc/azgate/edge.yaml\n",
		"another file":      "[Service]\n" + check + "ExecStart=/usr/bin/azgate-node edge --config /etc/edge.yaml\n",
		"a variable":        "[Service]\n" + check + "ExecStart=/usr/bin/azgate-node edge --config /etc/azgate/edge.yaml $OPTS\n",
		"a continuation":    "[Service]\n" + check + "ExecStart=/usr/bin/azgate-node edge --config /etc/azgate/edge.yaml \\\n",
		"unchecked pre-run": "[Service]\n" + check + start + "ExecStartPre=/usr/bin/azgate-node edge --config /etc/azgate/edge.yaml --help\n",
	} {
		if c, err := parseCommand("edge", text); err == nil {
			t.Errorf("%s: %q, no error", name, c)
		}
	}
}
