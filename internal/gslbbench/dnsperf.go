package gslbbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ecsOption is dnsperf's -E value for an EDNS Client Subnet option (code
// 8, RFC 7871 §6): family, source prefix length, scope 0, and the address
// truncated to the prefix's bytes.
func ecsOption(p netip.Prefix) string {
	p = p.Masked()
	fam, raw := 1, p.Addr().AsSlice()
	if p.Addr().Is6() {
		fam = 2
	}
	n := (p.Bits() + 7) / 8
	b := []byte{0, byte(fam), byte(p.Bits()), 0}
	b = append(b, raw[:n]...)
	return "8:" + hex.EncodeToString(b)
}

// perfResult is one dnsperf process's outcome.
type perfResult struct {
	Sent, Completed, Lost int
	Timeouts              int // "> T" lines: queries that timed out (-t)
	QPS                   float64
	MeanLatency           float64 // seconds, dnsperf's own average
	RunTime               float64 // seconds
	Rcodes                map[string]int
	Latencies             []float64 // seconds, one per answered query (-v)
}

var (
	reSent      = regexp.MustCompile(`Queries sent:\s+(\d+)`)
	reCompleted = regexp.MustCompile(`Queries completed:\s+(\d+)`)
	reLost      = regexp.MustCompile(`Queries lost:\s+(\d+)`)
	reQPS       = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	reMean      = regexp.MustCompile(`Average Latency \(s\):\s+([0-9.]+)`)
	reRun       = regexp.MustCompile(`Run time \(s\):\s+([0-9.]+)`)
)

// parseDnsperf reads dnsperf -v output: one "> RCODE NAME TYPE LATENCY"
// line per answered query ("> T NAME TYPE" for a timeout), then the
// statistics block. It fails when the statistics are missing, so a
// changed output format cannot pass as zero queries.
func parseDnsperf(r io.Reader) (*perfResult, error) {
	res := &perfResult{Rcodes: map[string]int{}}
	var stats strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "> ") {
			f := strings.Fields(line)
			if len(f) == 4 && f[1] == "T" {
				res.Timeouts++
			}
			if len(f) == 5 {
				lat, err := strconv.ParseFloat(f[4], 64)
				if err != nil {
					return nil, fmt.Errorf("dnsperf line %q: %w", line, err)
				}
				res.Rcodes[f[1]]++
				res.Latencies = append(res.Latencies, lat)
			}
			continue
		}
		stats.WriteString(line)
		stats.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	s := stats.String()
	ints := []struct {
		re *regexp.Regexp
		p  *int
	}{{reSent, &res.Sent}, {reCompleted, &res.Completed}, {reLost, &res.Lost}}
	for _, x := range ints {
		m := x.re.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("dnsperf output has no %q line:\n%s", x.re, tail(s, 2000))
		}
		*x.p, _ = strconv.Atoi(m[1])
	}
	floats := []struct {
		re *regexp.Regexp
		p  *float64
	}{{reQPS, &res.QPS}, {reMean, &res.MeanLatency}, {reRun, &res.RunTime}}
	for _, x := range floats {
		m := x.re.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("dnsperf output has no %q line:\n%s", x.re, tail(s, 2000))
		}
		*x.p, _ = strconv.ParseFloat(m[1], 64)
	}
	if len(res.Latencies) != res.Completed {
		return nil, fmt.Errorf("dnsperf: %d per-query lines for %d completed queries", len(res.Latencies), res.Completed)
	}
	return res, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// loadSpec is one load run against one server: one dnsperf process per
// region (dnsperf sends one fixed EDNS option per run, so the client
// subnets are spread by running one process per region at once).
type loadSpec struct {
	server    netip.AddrPort
	queries   string // query file
	duration  time.Duration
	rate      int // total queries/s over all processes; 0: as fast as answered
	inflight  int // outstanding queries per process (-q)
	clientCPU string
	dnsperf   string
	taskset   string
}

// runLoad runs the dnsperf processes at once and returns each one's result.
func runLoad(ctx context.Context, l loadSpec) ([]*perfResult, error) {
	type out struct {
		i   int
		res *perfResult
		err error
	}
	ch := make(chan out, len(Regions))
	for i, r := range Regions {
		args := []string{"-s", l.server.Addr().String(), "-p", strconv.Itoa(int(l.server.Port())),
			"-d", l.queries, "-l", fmt.Sprintf("%.3f", l.duration.Seconds()),
			"-c", "1", "-q", strconv.Itoa(l.inflight), "-t", "2",
			"-E", ecsOption(r.Client), "-v"}
		if l.rate > 0 {
			args = append(args, "-Q", strconv.Itoa(max(1, l.rate/len(Regions))))
		}
		cmd := pinned(ctx, l.taskset, l.clientCPU, l.dnsperf, args...)
		go func() {
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				ch <- out{i, nil, fmt.Errorf("%s: %w: %s", cmd, err, tail(stderr.String(), 1000))}
				return
			}
			res, err := parseDnsperf(&stdout)
			if err != nil {
				err = fmt.Errorf("%s: %w", cmd, err)
			}
			ch <- out{i, res, err}
		}()
	}
	rs := make([]*perfResult, len(Regions))
	var firstErr error
	for range Regions {
		o := <-ch
		rs[o.i] = o.res
		if o.err != nil && firstErr == nil {
			firstErr = o.err
		}
	}
	return rs, firstErr
}

// pinned is name args... under `taskset -c cpus` when both are given.
func pinned(ctx context.Context, taskset, cpus, name string, args ...string) *exec.Cmd {
	if taskset != "" && cpus != "" {
		return exec.CommandContext(ctx, taskset, append([]string{"-c", cpus, name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// percentile is the nearest-rank percentile of xs (sorted in place).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	k := int(math.Ceil(float64(len(xs))*p/100)) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}
