package roleconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type settings struct {
	name    string
	etcd    string
	attach  []string
	health  []string
	seed    uint32
	rate    float64
	on      bool
	grace   time.Duration
	workers int
}

func flagSet(s *settings) *pflag.FlagSet {
	fs := pflag.NewFlagSet("edge", pflag.ContinueOnError)
	fs.StringVar(&s.name, "name", "", "")
	fs.StringVar(&s.etcd, "etcd-endpoints", "unix:///default", "")
	fs.StringSliceVar(&s.attach, "attach", nil, "")
	fs.StringArrayVar(&s.health, "health-command", nil, "")
	fs.Uint32Var(&s.seed, "hash-seed", 7, "")
	fs.Float64Var(&s.rate, "rate-floor-pps", 1.5, "")
	fs.BoolVar(&s.on, "follow-share", true, "")
	fs.DurationVar(&s.grace, "store-grace", time.Minute, "")
	fs.IntVar(&s.workers, "workers", 0, "")
	fs.String("config", "", "")
	fs.String("old", "", "")
	_ = fs.MarkHidden("old")
	return fs
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var opts = Options{Skip: []string{"config"}}

func TestLoadSetsEveryKind(t *testing.T) {
	var s settings
	fs := flagSet(&s)
	p := writeFile(t, `# an edge
name: edge-a1
etcd-endpoints: unix:///run/etcd.sock
attach: [eth0, eth1]
health-command:
  - "db=/usr/bin/check --fast, --x"
hash-seed: 42
rate-floor-pps: 3
follow-share: false
store-grace: 90s
workers: 4
`)
	if err := Load(p, fs, opts); err != nil {
		t.Fatal(err)
	}
	want := settings{name: "edge-a1", etcd: "unix:///run/etcd.sock", attach: []string{"eth0", "eth1"},
		health: []string{"db=/usr/bin/check --fast, --x"}, seed: 42, rate: 3, on: false, grace: 90 * time.Second, workers: 4}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if !fs.Changed("hash-seed") || !fs.Changed("attach") {
		t.Fatal("flags set from the file do not count as given")
	}
}

func TestCommandLineWins(t *testing.T) {
	var s settings
	fs := flagSet(&s)
	if err := fs.Parse([]string{"--name", "cli", "--attach", "eth9"}); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "name: file\nattach: [eth0]\nhash-seed: 3\n")
	if err := Load(p, fs, opts); err != nil {
		t.Fatal(err)
	}
	if s.name != "cli" || !reflect.DeepEqual(s.attach, []string{"eth9"}) || s.seed != 3 {
		t.Fatalf("got %+v", s)
	}
}

func TestEmptyFileSetsNothing(t *testing.T) {
	for _, text := range []string{"", "# only comments\n", "---\n"} {
		var s settings
		fs := flagSet(&s)
		if err := Load(writeFile(t, text), fs, opts); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if s.etcd != "unix:///default" || s.seed != 7 || fs.Changed("name") {
			t.Fatalf("%q: defaults changed: %+v", text, s)
		}
	}
}

func TestErrorsNameFileLineKey(t *testing.T) {
	var s settings
	fs := flagSet(&s)
	p := writeFile(t, `name: a
etcd-endpoint: unix:///x
hash-seed: many
follow-share: "yes"
store-grace: 5
attach: eth0
name: b
config: /etc/other.yaml
old: x
rate-floor-pps: [1]
workers:
`)
	err := Load(p, fs, opts)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, w := range []string{
		p + `:2: unknown key "etcd-endpoint" (did you mean "etcd-endpoints"?)`,
		p + `:3: key "hash-seed": want an integer, not str "many"`,
		p + `:4: key "follow-share": want true or false, not str "yes"`,
		p + `:5: key "store-grace": want a duration string such as "5s"`,
		p + `:6: key "attach": want a list`,
		p + `:7: key "name" given twice (first at line 1)`,
		p + `:8: unknown key "config"`,
		p + `:9: unknown key "old"`,
		p + `:10: key "rate-floor-pps": want a number`,
		p + `:11: key "workers": no value`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
}

func TestValueTheFlagRefuses(t *testing.T) {
	var s settings
	fs := flagSet(&s)
	p := writeFile(t, "hash-seed: -1\nstore-grace: soon\nnme: x\n")
	err := Load(p, fs, opts)
	if err == nil || !strings.Contains(err.Error(), p+`:1: key "hash-seed"`) || !strings.Contains(err.Error(), p+`:2: key "store-grace"`) ||
		!strings.Contains(err.Error(), p+`:3: unknown key "nme" (did you mean "name"?)`) {
		t.Fatalf("got %v", err)
	}
}

func TestNotAMappingAndBadYAML(t *testing.T) {
	var s settings
	for text, want := range map[string]string{
		"- name\n":                 "want a mapping",
		"name: [a\n":               "edge.yaml",
		"? [a]\n: b\n":             "want a flag name",
		"name: &x a\nattach: *x\n": "aliases",
	} {
		err := Load(writeFile(t, text), flagSet(&s), opts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
	if err := Load(filepath.Join(t.TempDir(), "none.yaml"), flagSet(&s), opts); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	var s settings
	p := writeFile(t, "name: "+strings.Repeat("x", MaxSize)+"\n")
	if err := Load(p, flagSet(&s), opts); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("got %v", err)
	}
}

func TestKeys(t *testing.T) {
	var s settings
	got := Keys(flagSet(&s), opts)
	want := []string{"attach", "etcd-endpoints", "follow-share", "hash-seed", "health-command", "name", "rate-floor-pps", "store-grace", "workers"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestJoinedList(t *testing.T) {
	o := Options{Skip: []string{"config"}, Joined: []string{"etcd-endpoints"}}
	var s settings
	fs := flagSet(&s)
	p := writeFile(t, "etcd-endpoints: [https://192.0.2.1:2379, https://192.0.2.2:2379]\n")
	if err := Load(p, fs, o); err != nil || s.etcd != "https://192.0.2.1:2379,https://192.0.2.2:2379" {
		t.Fatalf("got %q, %v", s.etcd, err)
	}
	s = settings{}
	fs = flagSet(&s)
	if err := Load(writeFile(t, "etcd-endpoints: https://192.0.2.1:2379,https://192.0.2.2:2379\n"), fs, o); err != nil || s.etcd != "https://192.0.2.1:2379,https://192.0.2.2:2379" {
		t.Fatalf("the string form: %q, %v", s.etcd, err)
	}
	for _, bad := range []string{"etcd-endpoints: []\n", "etcd-endpoints: [\"a,b\"]\n", "etcd-endpoints: [a, 3]\n"} {
		if err := Load(writeFile(t, bad), flagSet(&s), o); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// Not joined: a list for a string flag is refused.
	if err := Load(writeFile(t, "name: [a, b]\n"), flagSet(&s), o); err == nil || !strings.Contains(err.Error(), "want a string") {
		t.Errorf("a list for name: %v", err)
	}
}

// A Single list flag takes one scalar (a file written when the flag took
// one value) or a list; other list flags still want a list.
func TestSingleList(t *testing.T) {
	o := Options{Skip: []string{"config"}, Single: []string{"health-command"}}
	var s settings
	if err := Load(writeFile(t, "health-command: /bin/true\n"), flagSet(&s), o); err != nil || !reflect.DeepEqual(s.health, []string{"/bin/true"}) {
		t.Fatalf("a scalar: %q, %v", s.health, err)
	}
	s = settings{}
	if err := Load(writeFile(t, "health-command: [/bin/true, /bin/false]\n"), flagSet(&s), o); err != nil || !reflect.DeepEqual(s.health, []string{"/bin/true", "/bin/false"}) {
		t.Fatalf("a list: %q, %v", s.health, err)
	}
	for _, bad := range []string{"health-command: true\n", "health-command:\n", "health-command: {a: b}\n"} {
		if err := Load(writeFile(t, bad), flagSet(&s), o); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := Load(writeFile(t, "attach: eth0\n"), flagSet(&s), o); err == nil || !strings.Contains(err.Error(), "want a list") {
		t.Errorf("a scalar for attach (not Single): %v", err)
	}
}
