// Package roleconfig reads a role's configuration file into the role's
// command-line flags: the file's keys are the role's long flag names, and
// a flag given on the command line wins over the file. The flags stay the
// one description of a role's settings (docs/config.md is generated from
// them), so a file can say nothing a flag cannot.
//
// The file is YAML: a mapping of flag names to values. Strings, numbers
// and booleans are scalars of the flag's type (a duration is a string
// such as "5s"); a flag that takes a list (repeatable, or
// comma-separated) takes a YAML list (Options.Single: or one scalar). Unknown keys, keys given twice,
// values of the wrong type and values the flag refuses are errors naming
// the file, the line and the key; all of them are reported at once.
package roleconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// MaxSize bounds a configuration file: a role's settings are a few
// kilobytes; anything larger is not one.
const MaxSize = 1 << 20

// Options say which flags of the set a file may not set.
type Options struct {
	// Skip names flags that are not settings (e.g. "config",
	// "check-config", "help"): a file giving them is refused as for an
	// unknown key. Hidden flags are always skipped.
	Skip []string
	// Joined names string flags that hold a comma-separated list
	// ("etcd-endpoints"): the file may give them a YAML list, joined
	// with commas, or the string itself.
	Joined []string
	// Single names list flags (repeatable) that took one value once
	// (gslb's and pathd's "listen", announce's "vip"): the file may give
	// them a list or, as a file written for the single value does, one
	// scalar, a list of one.
	Single []string
}

// Keys are the flags a file may set, sorted.
func Keys(fs *pflag.FlagSet, o Options) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if settable(f, o) {
			out = append(out, f.Name)
		}
	})
	sort.Strings(out)
	return out
}

func settable(f *pflag.Flag, o Options) bool {
	if f.Hidden || f.Deprecated != "" {
		return false
	}
	for _, s := range o.Skip {
		if s == f.Name {
			return false
		}
	}
	return true
}

// Entry is one key of a file, its value as the flag's text form.
type Entry struct {
	Key    string
	Line   int
	Values []string // one for a scalar flag; the items of a list
	List   bool
}

// Parse reads a file's entries and checks every key against fs: a key
// must be a settable flag and its value of the flag's kind. It does not
// set anything. With an error, the entries returned are those that were
// good.
func Parse(path string, fs *pflag.FlagSet, o Options) ([]Entry, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, fs, o)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", path, MaxSize)
	}
	return data, nil
}

func parse(path string, data []byte, fs *pflag.FlagSet, o Options) ([]Entry, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil // empty, or comments only
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values (key: value lines)", path, top.Line)
	}
	keys := Keys(fs, o)
	var errs []error
	var out []Entry
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			errs = append(errs, fmt.Errorf("%s: key %q: want a flag name", at, k.Value))
			continue
		}
		name := k.Value
		if line, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("%s: key %q given twice (first at line %d)", at, name, line))
			continue
		}
		seen[name] = k.Line
		f := fs.Lookup(name)
		if f == nil || !settable(f, o) {
			msg := fmt.Sprintf("%s: unknown key %q", at, name)
			if s := suggest(strings.TrimLeft(name, "-"), keys); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		e, err := entry(f, v, slices.Contains(o.Joined, name), slices.Contains(o.Single, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: key %q: %w", at, name, err))
			continue
		}
		e.Key, e.Line = name, k.Line
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// kind is what a flag's Type() needs from YAML.
func kind(t string) string {
	switch {
	case strings.HasSuffix(t, "Slice") || strings.HasSuffix(t, "Array"):
		return "list"
	case t == "bool":
		return "bool"
	case t == "duration":
		return "duration"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "int"
	case strings.HasPrefix(t, "float"):
		return "float"
	}
	return "string"
}

// want says what a kind takes, for errors.
var want = map[string]string{
	"list":     "a list ([a, b] or one \"- item\" a line)",
	"bool":     "true or false",
	"duration": `a duration string such as "5s" or "1m30s"`,
	"int":      "an integer",
	"float":    "a number",
	"string":   "a string",
}

func entry(f *pflag.Flag, v *yaml.Node, joined, single bool) (Entry, error) {
	k := kind(f.Value.Type())
	if v.Kind == yaml.AliasNode {
		return Entry{}, errors.New("YAML aliases are not taken: write the value")
	}
	if joined && k == "string" && v.Kind == yaml.SequenceNode {
		var items []string
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag != "!!str" || it.Value == "" || strings.Contains(it.Value, ",") {
				return Entry{}, fmt.Errorf("item at line %d: want a non-empty string without a comma", it.Line)
			}
			items = append(items, it.Value)
		}
		if len(items) == 0 {
			return Entry{}, errors.New("an empty list: give at least one item, or remove the key to keep the default")
		}
		return Entry{Values: []string{strings.Join(items, ",")}}, nil
	}
	if k == "list" && single && v.Kind == yaml.ScalarNode && (v.Tag == "!!str" || v.Tag == "!!int") {
		return Entry{List: true, Values: []string{v.Value}}, nil
	}
	if k == "list" {
		if v.Kind != yaml.SequenceNode {
			return Entry{}, fmt.Errorf("want %s", want[k])
		}
		e := Entry{List: true, Values: []string{}}
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" || it.Tag == "!!bool" {
				return Entry{}, fmt.Errorf("item at line %d: want a string", it.Line)
			}
			e.Values = append(e.Values, it.Value)
		}
		return e, nil
	}
	if v.Kind != yaml.ScalarNode {
		return Entry{}, fmt.Errorf("want %s", want[k])
	}
	ok := false
	switch k {
	case "bool":
		ok = v.Tag == "!!bool"
	case "int":
		ok = v.Tag == "!!int"
	case "float":
		ok = v.Tag == "!!int" || v.Tag == "!!float"
	case "duration":
		ok = v.Tag == "!!str"
	case "string":
		// A number stays what was written: a port, a name such as 7.
		ok = v.Tag == "!!str" || v.Tag == "!!int" || v.Tag == "!!float"
	}
	if !ok {
		got := strings.TrimPrefix(v.Tag, "!!")
		if v.Tag == "!!null" {
			return Entry{}, fmt.Errorf("no value: give %s, or remove the key to keep the default", want[k])
		}
		return Entry{}, fmt.Errorf("want %s, not %s %q", want[k], got, v.Value)
	}
	return Entry{Values: []string{v.Value}}, nil
}

// Apply sets the flags of fs from entries, except those given on the
// command line (Changed before Apply). A value the flag refuses is an
// error naming the file, line and key. Set flags count as Changed.
func Apply(path string, fs *pflag.FlagSet, entries []Entry) error {
	var errs []error
	for _, e := range entries {
		f := fs.Lookup(e.Key)
		if f == nil || f.Changed {
			continue
		}
		var err error
		if e.List {
			sv, ok := f.Value.(pflag.SliceValue)
			if !ok {
				err = errors.New("flag takes no list")
			} else {
				err = sv.Replace(e.Values)
			}
			if err == nil {
				f.Changed = true
			}
		} else {
			err = fs.Set(e.Key, e.Values[0])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: key %q: %v", path, e.Line, e.Key, err))
		}
	}
	return errors.Join(errs...)
}

// Load is Parse then Apply: the file's settings under the command line's.
// Every error is reported, those of Parse and those of the values the
// flags refuse; on an error the flags may be partly set.
func Load(path string, fs *pflag.FlagSet, o Options) error {
	entries, err := Parse(path, fs, o)
	if entries == nil && err != nil {
		return err
	}
	return errors.Join(err, Apply(path, fs, entries))
}

// suggest is the key nearest to name, if near enough to be a typo.
func suggest(name string, keys []string) string {
	best, bestD := "", len(name)/3+2
	for _, k := range keys {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		// A key that is a flag's prefix or extends one: "etcd" for "etcd-endpoints".
		for _, k := range keys {
			if len(name) >= 3 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k)) {
				return k
			}
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			c = min(c, prev[j]+1, cur[j-1]+1)
			cur[j] = c
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
