// Package packaging holds what installs azgate on hosts (the systemd units,
// the Debian package's scripts) and the tests of the package built by
// scripts/mkdeb.sh (make deb). It exposes the units' command lines so that
// whatever else starts a role (the lab) starts it as its unit does: the
// unit files are the one source of how a role is started.
package packaging

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed systemd/*.service
var units embed.FS

// Binary and NodeBinary are the installed binaries the units run: azgate
// (every role, the CLI) and azgate-node (the node roles, NodeRoles, and
// nothing else: it links no controller, etcd server or DNS, and an edge
// or an agent keeps fewer file pages resident; docs/deploy.md).
const (
	Binary     = "/usr/bin/azgate"
	NodeBinary = "/usr/bin/azgate-node"
)

// NodeRoles are the roles whose units run NodeBinary.
var NodeRoles = []string{"edge", "agent"}

// BinaryOf is the installed binary role's unit runs.
func BinaryOf(role string) string {
	if slices.Contains(NodeRoles, role) {
		return NodeBinary
	}
	return Binary
}

// ConfigFile is the configuration file the unit of role reads.
func ConfigFile(role string) string { return "/etc/azgate/" + role + ".yaml" }

// Unit is the text of role's unit, azgate-ROLE.service.
func Unit(role string) ([]byte, error) {
	b, err := units.ReadFile("systemd/azgate-" + role + ".service")
	if err != nil {
		return nil, fmt.Errorf("no unit for role %q: %w", role, err)
	}
	return b, nil
}

// Command is how a unit runs its role: Check (the ExecStartPre that runs
// BinaryOf(role) with --check-config) then Start (ExecStart), each an argv.
type Command struct {
	Check, Start []string
}

// RoleCommand reads role's unit: its ExecStart, and the ExecStartPre that
// checks the configuration. Both must run BinaryOf(role) with role's ConfigFile
// (what With substitutes); anything else is an error, so a unit the
// callers cannot follow is found, not half followed.
func RoleCommand(role string) (Command, error) {
	b, err := Unit(role)
	if err != nil {
		return Command{}, err
	}
	return parseCommand(role, string(b))
}

func parseCommand(role, text string) (Command, error) {
	var c Command
	section := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if section != "[Service]" || !ok || (k != "ExecStart" && k != "ExecStartPre") {
			continue
		}
		at := fmt.Sprintf("azgate-%s.service:%d: %s", role, i+1, k)
		if strings.HasSuffix(v, `\`) || strings.ContainsAny(v, `"'$%`) {
			return Command{}, fmt.Errorf("%s: continuation lines, quotes, variables and specifiers are not followed", at)
		}
		argv := strings.Fields(v)
		if len(argv) == 0 || strings.HasPrefix(argv[0], "+") {
			continue // a privileged preparation (a directory), not the role
		}
		if argv[0] != BinaryOf(role) || len(argv) < 2 || argv[1] != role || !slices.Contains(argv, ConfigFile(role)) {
			return Command{}, fmt.Errorf("%s=%s: want %s %s ... %s", at, v, BinaryOf(role), role, ConfigFile(role))
		}
		switch {
		case k == "ExecStart" && c.Start != nil:
			return Command{}, fmt.Errorf("%s: given twice", at)
		case k == "ExecStart":
			c.Start = argv
		case slices.Contains(argv, "--check-config") && c.Check != nil:
			return Command{}, fmt.Errorf("%s: a second --check-config", at)
		case slices.Contains(argv, "--check-config"):
			c.Check = argv
		default:
			return Command{}, fmt.Errorf("%s=%s: runs the role without --check-config", at, v)
		}
	}
	if c.Start == nil || c.Check == nil {
		return Command{}, fmt.Errorf("azgate-%s.service: want an ExecStart and an ExecStartPre with --check-config", role)
	}
	return c, nil
}

// With is the command with binary for BinaryOf(role) and config for the
// role's ConfigFile: the caller passes its own build of that binary
// (azgate-node for NodeRoles).
func (c Command) With(role, binary, config string) Command {
	sub := func(argv []string) []string {
		out := slices.Clone(argv)
		for i, a := range out {
			switch {
			case i == 0 && a == BinaryOf(role):
				out[i] = binary
			case a == ConfigFile(role):
				out[i] = config
			}
		}
		return out
	}
	return Command{Check: sub(c.Check), Start: sub(c.Start)}
}
