package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/packaging"
	"gopkg.in/yaml.v3"
)

// The lab starts every role as its systemd unit does (issue 20): it writes
// the role's settings into a configuration file (the keys are the role's
// flag names, docs/config.md), runs the unit's ExecStartPre (--check-config)
// and then its ExecStart, both read from packaging/systemd with the lab's
// binary and file substituted. The lab's settings are still written as the
// flags they stand for (--key value); roleConfig turns them into the file.

// listFlags are the flags, by role, that take a list (the file needs a
// YAML list for them, docs/config.md). commaFlags are those of them whose
// command-line value is a comma-separated list (pflag StringSlice).
var listFlags = map[string][]string{
	"controller": {"ddos-eip"},
	"edge":       {"arp-iface", "attach", "health-command", "upgrade-allow-drop"},
	"agent":      {"local-allow", "local-prefix", "upgrade-allow-drop"},
	"gslb":       {"listen"},
	"pathd":      {"listen", "peer", "peer-token-file", "redis-replica"},
	"prober":     {"dns", "origin", "relay"},
	"announce":   {"check", "peer", "vip"},
}

var commaFlags = []string{"arp-iface", "attach", "local-prefix", "upgrade-allow-drop"}

var (
	intRE   = regexp.MustCompile(`^-?[0-9]+$`)
	floatRE = regexp.MustCompile(`^-?[0-9]*\.[0-9]+([eE][-+]?[0-9]+)?$|^-?[0-9]+[eE][-+]?[0-9]+$`)
)

// roleConfig is the configuration file of args (the role's name, then
// its flags as "--key value" or "--key=value"): each flag a key, in the
// order given, a repeated list flag one list, a repeated scalar flag its
// last value (as on the command line).
func roleConfig(args []string) ([]byte, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("lab: no role")
	}
	role := args[0]
	lists := listFlags[role]
	var keys []string
	vals := map[string][]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || len(a) == 2 {
			return nil, fmt.Errorf("lab: %s: %q is not a --flag", role, a)
		}
		k, v, ok := strings.Cut(a[2:], "=")
		if !ok {
			if i+1 == len(args) {
				return nil, fmt.Errorf("lab: %s: --%s has no value", role, k)
			}
			i++
			v = args[i]
		}
		if _, seen := vals[k]; !seen {
			keys = append(keys, k)
		}
		switch {
		case !contains(lists, k):
			vals[k] = []string{v}
		case contains(commaFlags, k):
			vals[k] = append(vals[k], strings.Split(v, ",")...)
		default:
			vals[k] = append(vals[k], v)
		}
	}
	doc := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range keys {
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k})
		if !contains(lists, k) {
			doc.Content = append(doc.Content, scalar(vals[k][0]))
			continue
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, v := range vals[k] {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
		}
		doc.Content = append(doc.Content, seq)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# azgate lab: the settings of azgate "+role+" (docs/config.md)\n"), b...), nil
}

// scalar is a value with the YAML type its text has, as a person writing
// the file would give it: a number for an integer or number flag (a
// string flag takes a number's text too), true/false for a boolean, a
// string otherwise (durations included).
func scalar(v string) *yaml.Node {
	tag := "!!str"
	switch {
	case intRE.MatchString(v):
		tag = "!!int"
	case floatRE.MatchString(v):
		tag = "!!float"
	case v == "true" || v == "false":
		tag = "!!bool"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

// configDir holds the configuration file of every role the lab starts.
func (l *Lab) configDir() string { return filepath.Join(l.Cfg.StateDir, "config") }

// roleCommand writes the configuration file name.yaml of args (the role,
// then its flags) and returns the unit's commands for it: the check, then
// the start.
func (l *Lab) roleCommand(name string, args []string) (packaging.Command, error) {
	if len(args) == 0 {
		return packaging.Command{}, fmt.Errorf("lab: %s: no role", name)
	}
	c, err := packaging.RoleCommand(args[0])
	if err != nil {
		return packaging.Command{}, fmt.Errorf("lab: %w", err)
	}
	b, err := roleConfig(args)
	if err != nil {
		return packaging.Command{}, err
	}
	if err := os.MkdirAll(l.configDir(), 0o700); err != nil {
		return packaging.Command{}, err
	}
	path := filepath.Join(l.configDir(), name+".yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return packaging.Command{}, err
	}
	bin := l.Cfg.Binary
	if packaging.BinaryOf(args[0]) == packaging.NodeBinary {
		bin = l.Cfg.NodeBinary
	}
	return c.With(args[0], bin, path), nil
}

// checkConfig runs a unit's --check-config command in namespace ns (""
// for the lab's own), as systemd runs the ExecStartPre: the role does not
// start if it fails.
func checkConfig(ns string, argv []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run *exec.Cmd
	if ns == "" {
		run = exec.CommandContext(ctx, argv[0], argv[1:]...)
	} else {
		c := netns.Command(ns, argv...)
		run = exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	}
	if out, err := run.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RunningSettings are the settings a role process runs with: the file
// its command line's --config names, each key's value as text (a list's
// items joined with commas), and the flags on the command line after the
// role's name, which win over the file.
func RunningSettings(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	out := map[string]string{}
	var flags [][2]string
	for i := 2; i < len(argv); i++ {
		k, v, ok := strings.Cut(strings.TrimPrefix(argv[i], "--"), "=")
		if !ok && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
			i++
			v = argv[i]
		}
		flags = append(flags, [2]string{k, v})
	}
	for _, f := range flags {
		if f[0] != "config" {
			continue
		}
		data, err := os.ReadFile(f[1])
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f[1], err)
		}
		for k, v := range m {
			if l, ok := v.([]any); ok {
				var items []string
				for _, it := range l {
					items = append(items, fmt.Sprint(it))
				}
				out[k] = strings.Join(items, ",")
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	}
	for _, f := range flags {
		if f[0] != "config" {
			out[f[0]] = f[1]
		}
	}
	return out, nil
}
