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
		if c.Start[0] != Binary || !slices.Contains(c.Start, ConfigFile(r)) {
			t.Errorf("%s: With changed the unit's command %q", r, c.Start)
		}
	}
	if _, err := RoleCommand("nosuch"); err == nil {
		t.Error("a role without a unit has a command")
	}
}
