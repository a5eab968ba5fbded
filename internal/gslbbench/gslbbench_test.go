package gslbbench

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bench"
)

// serveEnv makes the test binary the serving child (TestMain): the bench
// runs our server as `TESTBINARY` with this set instead of `azgate-lab bench
// gslb-serve`.
const serveEnv = "AZGATE_GSLBBENCH_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer cancel()
		cfg := ""
		for i, a := range os.Args {
			if a == "--config" && i+1 < len(os.Args) {
				cfg = os.Args[i+1]
			}
		}
		if err := Serve(ctx, cfg, os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("serve: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needTools fails when gdnsd or dnsperf is missing as root (scripts/setup.sh
// installs them, as it does redis-server and etcd) and skips otherwise.
func needTools(t *testing.T) {
	t.Helper()
	for _, b := range []string{"gdnsd", "dnsperf", "taskset"} {
		if _, err := exec.LookPath(b); err != nil {
			if os.Geteuid() != 0 {
				t.Skipf("needs root (and %s, which scripts/setup.sh installs as root): %v", b, err)
			}
			t.Fatalf("%s is missing (scripts/setup.sh installs it: apt-get install gdnsd dnsperf): %v", b, err)
		}
	}
}

// TestBenchShort runs the whole benchmark briefly: both servers start, pass
// the correctness checks (same region's VIP per client subnet, our ECS
// scope), dnsperf's output parses with answers from both, and one failover
// moves both servers' answers.
func TestBenchShort(t *testing.T) {
	needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	rep, err := Run(ctx, Options{
		Duration: 700 * time.Millisecond, Rounds: 1, Rate: 2000, FailoverReps: 1,
		ServeArgv: []string{os.Args[0]}, ServeEnv: []string{serveEnv + "=1"},
		CPUProfile: prof, Out: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The server's profile, written in the run's directory, is copied out
	// once it stopped.
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("cpu profile %s: %v, %v", prof, fi, err)
	}
	if len(rep.Checks) != 3*len(Regions) {
		t.Errorf("%d checks, want %d", len(rep.Checks), 3*len(Regions))
	}
	for _, c := range rep.Checks {
		if c.Ours != c.Want || c.Gdns != c.Want {
			t.Errorf("check %+v", c)
		}
	}
	for k, l := range rep.Rounds[0] {
		if l.Completed == 0 || l.QPS <= 0 || l.P99Latency <= 0 || l.CPUPerQuery <= 0 {
			t.Errorf("server %d: load %+v", k, l)
		}
	}
	if rep.Fixed[0].Completed == 0 || rep.Fixed[1].Completed == 0 {
		t.Errorf("fixed-rate runs: %+v", rep.Fixed)
	}
	p := rep.Options.Probe
	for k := range 2 {
		if len(rep.Failover[k]) != 1 {
			t.Fatalf("failover times %v", rep.Failover)
		}
		// Down after Fall failed checks: more than (Fall-1) intervals
		// after the close; gdnsd adds up to 1 s (its state table swap).
		lo, hi := time.Duration(p.Fall-1)*p.Interval-100*time.Millisecond, time.Duration(p.Fall)*p.Interval+p.Timeout+1500*time.Millisecond
		if d := rep.Failover[k][0]; d < lo || d > hi {
			t.Errorf("server %d: failover %v, want within %v..%v", k, d, lo, hi)
		}
	}
	rs := rep.Results()
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"qps (saturation)"`, `"failover time median"`, `"baseline":"gdnsd 3.`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("results lack %s: %s", want, b)
		}
	}
	var sb strings.Builder
	if err := bench.Report(&sb, rs, false); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sb.String())
}

func TestParseDnsperf(t *testing.T) {
	out := `DNS Performance Testing Tool
Version 2.10.0

> NOERROR pathd.example A 0.000381
> NOERROR pathd.example A 0.000100
> T pathd.example A
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         3
  Queries completed:    2 (66.67%)
  Queries lost:         1 (33.33%)

  Response codes:       NOERROR 2 (100.00%)
  Average packet size:  request 53, response 69
  Run time (s):         1.000350
  Queries per second:   1.999300

  Average Latency (s):  0.000240 (min 0.000100, max 0.000381)
  Latency StdDev (s):   0.000140
`
	r, err := parseDnsperf(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 3 || r.Completed != 2 || r.Lost != 1 || r.Rcodes["NOERROR"] != 2 || len(r.Latencies) != 2 || r.QPS < 1.99 || r.MeanLatency != 0.00024 {
		t.Errorf("%+v", r)
	}
	if _, err := parseDnsperf(strings.NewReader(strings.Replace(out, "Queries lost", "Lost", 1))); err == nil {
		t.Error("a missing statistics line parsed")
	}
	if _, err := parseDnsperf(strings.NewReader(strings.Replace(out, "> NOERROR pathd.example A 0.000100\n", "", 1))); err == nil {
		t.Error("fewer per-query lines than completed queries parsed")
	}
}

func TestECSOption(t *testing.T) {
	for p, want := range map[string]string{
		"198.51.100.0/24": "8:00011800c63364",
		"2001:db8:1::/48": "8:0002300020010db80001",
		"192.0.2.9/32":    "8:00012000c0000209",
		"203.0.113.77/20": "8:00011400cb0070",
	} {
		if got := ecsOption(netip.MustParsePrefix(p)); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}

func TestProbeSettingsValidate(t *testing.T) {
	ok := ProbeSettings{Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 2}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []ProbeSettings{
		{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2},
		{Interval: 2500 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2},
		{Interval: 2 * time.Second, Timeout: 2 * time.Second, Rise: 2, Fall: 2},
		{Interval: 2 * time.Second, Timeout: time.Second, Rise: 0, Fall: 2},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}
