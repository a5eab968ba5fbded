//go:build !node

package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/azgate/azgate/internal/roleconfig"
)

// The configuration reference (docs/config.md) and the default config
// files (packaging/etc/azgate/ROLE.yaml) are written from the roles'
// flags, the settings the roles read: `azgate docs config` and `azgate
// docs etc ROLE` print them, `make config-docs` writes them, and
// TestConfigDocsCurrent fails when a committed copy differs.

// siteKey is a setting a role cannot start without and that no default
// can give: the default file shows it commented out with an example.
type siteKey struct {
	key, example, why string
}

// siteData are each role's site keys, in the order to fill them in.
// TestDefaultConfigFiles checks that check-config names them when they
// are missing and passes once they are given.
var siteData = map[string][]siteKey{
	"edge": {
		{"name", "edge-a1", "this edge's name in its edge set (azgate set)"},
		{"attach", "[eth0, eth1]", "the Internet-side and underlay-side interfaces"},
	},
	"agent": {
		{"name", "host-a1", "this host's name (azgate host)"},
		{"underlay-if", "eth1", "the host's underlay interface"},
	},
	"bwmgr": {
		{"scope", "az", "az (one zone's manager, with zone and store) or region"},
		{"zone", "az-a", "scope az: the zone this manager serves"},
		{"store", "unix:///run/redis-bw/redis.sock", "scope az: the zone's measurement store"},
		{"region-store", "redis://192.0.2.20:6379", "the region tier's store"},
	},
	"pathd": {
		{"listen", "192.0.2.10:7090", "the API address behind the cluster VIP"},
		{"region", "region-a", "this server's region"},
		{"token-file", "/etc/azgate/pathd.token", "the probers' bearer token (mode 0600)"},
	},
	"prober": {
		{"node", "edge-a1", "this edge's or relay's node name"},
		{"relay", "[relay-b=198.51.100.7:443]", "relays to measure, NAME=IP:PORT (or origin)"},
		{"report-url", "http://pathd.example:7090/v1/reports", "pathd's report endpoint"},
		{"token-file", "/etc/azgate/prober.token", "pathd's report token (mode 0600)"},
	},
	"announce": {
		{"vip", "[192.0.2.53/32]", "the cluster's VIPs (an IPv6 /128 too needs next-hop6)"},
		{"asn", "64512", "the local AS number"},
		{"next-hop", "192.0.2.11", "this server's address on the router's segment"},
		{"peer", "[192.0.2.1:64500]", "the region's router(s)"},
		{"check", "[http://127.0.0.1:7090/healthz, tcp://127.0.0.1:6379]", "the local checks that must pass"},
	},
}

// roleCommands are the role commands of a fresh command tree, in roles' order.
func roleCommands() []*cobra.Command {
	root := newRoot()
	var out []*cobra.Command
	for _, r := range roles {
		for _, c := range root.Commands() {
			if c.Name() == r {
				out = append(out, c)
			}
		}
	}
	return out
}

// settableFlags are the flags of c a config file may set, by name.
func settableFlags(c *cobra.Command) []*pflag.Flag {
	var out []*pflag.Flag
	for _, k := range roleconfig.Keys(c.Flags(), configOptions(c)) {
		out = append(out, c.Flags().Lookup(k))
	}
	return out
}

// flagKind is a flag's type in the reference's words.
func flagKind(f *pflag.Flag) string {
	switch t := f.Value.Type(); {
	case strings.HasSuffix(t, "Slice"), strings.HasSuffix(t, "Array"):
		return "list of strings"
	case t == "bool":
		return "boolean"
	case t == "duration":
		return `duration ("5s")`
	case strings.HasPrefix(t, "uint"):
		return "integer ≥ 0"
	case strings.HasPrefix(t, "int"):
		return "integer"
	case strings.HasPrefix(t, "float"):
		return "number"
	}
	return "string"
}

// yamlDefault is a flag's default as YAML text.
func yamlDefault(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := sv.GetSlice()
		if len(items) == 0 {
			return "[]"
		}
		return yamlFlow(items)
	}
	switch flagKind(f) {
	case "string", `duration ("5s")`:
		return yamlFlow(f.DefValue)
	}
	return f.DefValue
}

// yamlFlow is v in YAML's flow style, on one line.
func yamlFlow(v any) string {
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		panic(err)
	}
	if n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	if n.Kind == yaml.ScalarNode && n.Value == "" {
		return `""`
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// reloads says which keys a running role re-reads on SIGHUP: log-level,
// and the monitor's mode of the roles with a data plane (roleMonitor).
const reloads = "log-level"

// roleReloads are the keys role re-reads on SIGHUP.
func roleReloads(role string) []string {
	if role == "edge" || role == "agent" {
		return []string{reloads, "monitor"}
	}
	return []string{reloads}
}

// writeConfigReference writes docs/config.md.
func writeConfigReference(w io.Writer) {
	fmt.Fprint(w, configIntro)
	for _, c := range roleCommands() {
		name := c.Name()
		fmt.Fprintf(w, "\n### %s\n\n%s.\n\n", name, strings.TrimSuffix(c.Short, "."))
		fmt.Fprintf(w, "Default file: `/etc/azgate/%s.yaml` (packaging/etc/azgate/%s.yaml).", name, name)
		if sd := siteData[name]; len(sd) > 0 {
			var ks []string
			for _, k := range sd {
				ks = append(ks, "`"+k.key+"`")
			}
			fmt.Fprintf(w, " Site data to set: %s.", strings.Join(ks, ", "))
		} else {
			fmt.Fprint(w, " It runs as shipped: every key has a working default.")
		}
		fmt.Fprint(w, "\n\n| key | type | default | |\n|---|---|---|---|\n")
		for _, f := range settableFlags(c) {
			def := yamlDefault(f)
			if def == `""` || def == "[]" {
				def = ""
			} else {
				def = "`" + strings.ReplaceAll(def, "|", `\|`) + "`"
			}
			usage := strings.ReplaceAll(f.Usage, "|", `\|`)
			if slices.Contains(roleReloads(name), f.Name) {
				usage += " **Reloaded on SIGHUP.**"
			}
			kind := flagKind(f)
			if slices.Contains(configOptions(c).Joined, f.Name) {
				kind = "string or list of strings"
			}
			if kind == "list of strings" && slices.Contains(configOptions(c).Single, f.Name) {
				kind = "list of strings, or one string"
			}
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", f.Name, kind, def, usage)
		}
	}
}

// writeDefaultConfig writes packaging/etc/azgate/ROLE.yaml.
func writeDefaultConfig(w io.Writer, c *cobra.Command) {
	name := c.Name()
	fmt.Fprintf(w, `# /etc/azgate/%[1]s.yaml: the settings of "azgate %[1]s" (%[2]s).
#
# Keys are the long flag names of "azgate %[1]s"; a flag given on the
# command line wins over this file. Lists are YAML lists, durations strings
# such as "5s"; secrets stay in their own files (the *-file keys, mode 0600).
# Reference: docs/config.md or "azgate %[1]s --help".
#
# Check it without starting anything:
#   azgate %[1]s --config /etc/azgate/%[1]s.yaml --check-config
# "systemctl reload" (SIGHUP) re-reads %[3]s only; other keys take effect
# at the next restart.
#
# Generated by "azgate docs etc %[1]s": edit the copy in /etc, not this one.
`, name, strings.TrimSuffix(c.Short, "."), strings.Join(roleReloads(name), " and "))
	site := map[string]bool{}
	if sd := siteData[name]; len(sd) > 0 {
		fmt.Fprint(w, "\n# --- Site data: set these; the role does not start without them ---\n")
		for _, k := range sd {
			site[k.key] = true
			fmt.Fprintf(w, "#%s: %s    # REQUIRED: %s\n", k.key, k.example, k.why)
		}
	}
	fmt.Fprint(w, "\n# --- Settings and their defaults: uncomment a line to change it ---\n")
	for _, f := range settableFlags(c) {
		if site[f.Name] {
			continue
		}
		fmt.Fprintln(w)
		for _, l := range wrap(f.Usage, 72) {
			fmt.Fprintf(w, "# %s\n", l)
		}
		fmt.Fprintf(w, "#%s: %s\n", f.Name, yamlDefault(f))
	}
}

// wrap breaks s into lines of at most width (longer words stay whole).
func wrap(s string, width int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(out, line)
}

func init() {
	register(func() *cobra.Command {
		docs := &cobra.Command{
			Use:    "docs",
			Short:  "Print generated documentation (make config-docs writes it)",
			Hidden: true,
			Args:   cobra.NoArgs,
		}
		docs.AddCommand(&cobra.Command{
			Use:   "config",
			Short: "Print docs/config.md, the configuration reference, from the roles' flags",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				writeConfigReference(cmd.OutOrStdout())
				return nil
			},
		}, &cobra.Command{
			Use:       "etc ROLE",
			Short:     "Print a role's default config file (packaging/etc/azgate/ROLE.yaml)",
			Args:      cobra.ExactArgs(1),
			ValidArgs: roles,
			RunE: func(cmd *cobra.Command, args []string) error {
				for _, c := range roleCommands() {
					if c.Name() == args[0] {
						writeDefaultConfig(cmd.OutOrStdout(), c)
						return nil
					}
				}
				return fmt.Errorf("%q is not a role (want one of %s)", args[0], strings.Join(roles, ", "))
			},
		})
		return docs
	})
}

const configIntro = `# Configuration files

<!-- Generated by "azgate docs config" (make config-docs) from the roles'
flags: edit cmd/azgate (configdocs.go for this text), not this file.
TestConfigDocsCurrent fails when it differs from the generated output. -->

Every role (` + "`azgate controller`, `edge`, `agent`, `bwmgr`, `gslb`, `pathd`, `prober`, `announce`" + `)
reads its settings from its flags and, with ` + "`--config FILE`" + `, from a YAML file.
The flags are the one description of the settings: this page is generated
from them, so it lists what the roles read, with their defaults.

## The file

- A YAML mapping whose keys are the role's **long flag names** without the
  dashes: ` + "`etcd-endpoints: unix:///var/lib/azgate/etcd.sock`" + `.
- Values have the flag's type: strings, integers, ` + "`true`/`false`" + `; durations
  are strings (` + "`store-grace: 30s`" + `); a repeatable or comma-separated list flag
  takes a YAML list (` + "`attach: [eth0, eth1]`" + `). ` + "`etcd-endpoints`" + ` takes a
  YAML list or one comma-separated string, as on the command line; ` + "`vip`" + `
  (announce) and ` + "`listen`" + ` (gslb, pathd), once single values, take a list or
  one string.
- **A flag given on the command line wins over the file**, key by key (a list
  flag on the command line replaces the file's whole list).
- Refused, each with the file, the line and the key, all at once: a key that
  is not a flag of that role (with "did you mean" when it is near one), a key
  given twice, a value of the wrong type (` + "`follow-share: \"yes\"`" + `, ` + "`hash-seed: many`" + `,
  a scalar for a list), an empty value (remove the key to keep the default),
  a value the flag refuses. The global CLI flags (` + "`--api`, `--json`" + `, ...) and
  ` + "`config`, `check-config`" + ` are not keys.
- Secrets are never values in the file: the ` + "`*-file`" + ` keys name files holding
  them (mode 0600 or stricter, as on the command line).
- At most 1 MiB.

The package installs a default file per role in ` + "`/etc/azgate/ROLE.yaml`" + `
(packaging/etc/azgate/ROLE.yaml, also generated): every setting commented out
with its default, and the **site data** a role cannot start without (node
name, interfaces, addresses, token files) at the top, marked ` + "`REQUIRED`" + `, with
an example value. ` + "`--name`" + ` is required for ` + "`edge`" + ` and ` + "`agent`" + ` (a node's name in the
store: no default could be right); ` + "`gslb`" + ` and ` + "`bwmgr`" + ` default their names to
the host name.

## Checking a configuration

` + "```" + `
azgate edge --config /etc/azgate/edge.yaml --check-config
` + "```" + `

reads the file and the flags and runs every check the role makes before it
starts: flag values, addresses, required settings, the files it reads
(token and password files exist and have safe modes, health-command files,
TLS certificate and key, prefix maps, GeoIP databases). It prints ` + "`ok`" + ` and
exits 0, or prints what is wrong and exits non-zero. It starts nothing,
opens no socket and connects to nothing: whether etcd, Redis or an interface
is there is found at start. The role's start runs the same checks, in the
same code, before it opens anything.

## Reload

On SIGHUP (` + "`systemctl reload`" + `), a running role re-reads its ` + "`--config`" + ` file and
applies **` + "`" + reloads + "`" + `**, and an edge's or an agent's **` + "`monitor`" + `** (off, drops,
trace: the data plane's mode changes at once, its rate and burst stay;
docs/observability.md), unless given on the command line,
which still wins; a key removed from the file returns to its default. A file
that no longer parses is logged and the running settings stay. Every other
key takes effect at the next restart (` + "`systemctl restart`" + `); the data
planes of the edges and agents keep forwarding while their role restarts
(pinned maps, docs/upgrades.md).

## Keys per role
`
