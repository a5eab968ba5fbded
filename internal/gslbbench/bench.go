package gslbbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/bench"
)

// Options of a run. Zero values get the defaults of Defaults.
type Options struct {
	Duration time.Duration // per server and round, saturation (default 5s)
	Rounds   int           // saturation rounds, servers alternate order; the median round is reported (default 3)
	Rate     int           // fixed-rate latency run, total queries/s over the 3 regions (default 5000; <0 skips)
	Inflight int           // outstanding queries per dnsperf process (-q; default 50: 150 in flight fit the servers' UDP receive buffers)
	// Threads is each server's thread count: GOMAXPROCS for ours,
	// udp_threads and tcp_threads for gdnsd (default 1).
	Threads int
	// ServerCPUs and ClientCPUs are taskset CPU lists for both servers
	// and for the dnsperf processes. Default on 2+ CPUs: servers on "1",
	// dnsperf on "0"; "-" means no pinning.
	ServerCPUs, ClientCPUs string
	Probe                  ProbeSettings // default interval 2s, timeout 1s, rise 2, fall 2
	FailoverReps           int           // default 6 (two per region); <0 skips
	// ServeArgv runs our server: argv[0] is the binary, the rest are its
	// arguments before "--config FILE" (default: this executable,
	// "bench", ServeChildArg).
	ServeArgv []string
	ServeEnv  []string // extra environment for the child
	// CPUProfile: our server writes a Go CPU profile of the whole run
	// into the run's directory, and the bench copies it here once the
	// server stopped (so the path is opened by the bench's own user only,
	// never handed to the servers' user).
	CPUProfile string
	// User, when set, is who both servers run as (through setpriv; the
	// bench must be root): they parse queries any local user can send,
	// so `azgate-lab bench gslb` runs them as "nobody" when it is root. The
	// run's directory is handed to that user.
	User    string
	Gdnsd   string // gdnsd binary (default: from PATH)
	Dnsperf string // dnsperf binary (default: from PATH)
	Out     func(format string, a ...any)

	taskset  string
	gdnsd    string
	setpriv  string
	uid, gid int // the servers' user and group
}

func (o *Options) defaults() error {
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Rate == 0 {
		o.Rate = 5000
	}
	if o.Inflight <= 0 {
		o.Inflight = 50
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.ServerCPUs == "" && o.ClientCPUs == "" && runtime.NumCPU() >= 2 {
		o.ServerCPUs, o.ClientCPUs = "1", "0"
	}
	if o.ServerCPUs == "-" {
		o.ServerCPUs = ""
	}
	if o.ClientCPUs == "-" {
		o.ClientCPUs = ""
	}
	if o.Probe.Interval == 0 {
		o.Probe.Interval = 2 * time.Second
	}
	if o.Probe.Timeout == 0 {
		o.Probe.Timeout = time.Second
	}
	if o.Probe.Rise == 0 {
		o.Probe.Rise = 2
	}
	if o.Probe.Fall == 0 {
		o.Probe.Fall = 2
	}
	if o.FailoverReps == 0 {
		o.FailoverReps = 6
	}
	if o.Out == nil {
		o.Out = func(string, ...any) {}
	}
	if len(o.ServeArgv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.ServeArgv = []string{exe, "bench", ServeChildArg}
	}
	// Settings first (they fail the same everywhere), then the tools.
	if err := o.Probe.Validate(); err != nil {
		return err
	}
	o.uid, o.gid = os.Geteuid(), os.Getegid() // the servers' user: ours unless User
	if o.User != "" {
		if os.Geteuid() != 0 {
			return fmt.Errorf("--user %q: switching users needs root", o.User)
		}
		u, err := user.Lookup(o.User)
		if err != nil {
			return fmt.Errorf("--user %q: %w", o.User, err)
		}
		o.uid, _ = strconv.Atoi(u.Uid)
		o.gid, _ = strconv.Atoi(u.Gid)
		if o.setpriv, err = exec.LookPath("setpriv"); err != nil {
			return fmt.Errorf("setpriv (util-linux) for --user: %w", err)
		}
	}
	look := func(name, given string) (string, error) {
		if given != "" {
			return given, nil
		}
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s not found (Debian: apt-get install %s; scripts/setup.sh installs it): %w", name, name, err)
		}
		return p, nil
	}
	var err1, err2 error
	o.gdnsd, err1 = look("gdnsd", o.Gdnsd)
	o.Dnsperf, err2 = look("dnsperf", o.Dnsperf)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if o.ServerCPUs != "" || o.ClientCPUs != "" {
		p, err := exec.LookPath("taskset")
		if err != nil {
			return fmt.Errorf("taskset (util-linux) for --server-cpus/--client-cpus: %w", err)
		}
		o.taskset = p
	}
	return nil
}

// Load is one server's figures from one load run (all three dnsperf
// processes together).
type Load struct {
	Server      string  `json:"server"`
	QPS         float64 `json:"qps"`
	Sent        int     `json:"sent"`
	Completed   int     `json:"completed"`
	Lost        int     `json:"lost"`           // dnsperf's count
	Timeouts    int     `json:"timeouts"`       // of which timed out (the rest were in flight when the time limit ended)
	RcvbufDrops uint64  `json:"rcvbuf_drops"`   // queries the kernel dropped at the server's full UDP receive buffer
	MeanLatency float64 `json:"mean_latency_s"` // over all answered queries
	P99Latency  float64 `json:"p99_latency_s"`
	CPU         float64 `json:"cpu_s"`        // server process CPU time during the run
	CPUPerQuery float64 `json:"cpu_per_q_us"` // CPU / completed queries
	Busy        float64 `json:"busy_pct"`     // CPU / wall time
	Wait        float64 `json:"wait_pct"`     // time its threads were runnable but not running / wall time
	Rcodes      map[string]int
}

// Check is one correctness probe of both servers.
type Check struct {
	Client     netip.Prefix
	Want       netip.Addr
	Ours, Gdns netip.Addr
	OurScope   int
	GdnsScope  int
}

// Report is everything a run measured.
type Report struct {
	GdnsdVersion string
	Load         string // /proc/loadavg before the run
	Checks       []Check
	Rounds       [][2]Load // per round: ours, gdnsd
	Fixed        [2]Load   // fixed-rate run: ours, gdnsd
	// Failover and recovery times per repetition: ours, gdnsd.
	Failover, Recovery [2][]time.Duration
	FailoverRegions    []string
	Options            Options
}

// Run runs the benchmark. Our server and gdnsd each run in their own
// process on their own loopback address; dnsperf and the failover polls
// are the bench's children or goroutines.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("bench gslb: %w", err)
	}
	rep = &Report{Options: o}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Load = strings.TrimSpace(string(b))
	}
	rep.GdnsdVersion = gdnsdVersion(o.gdnsd)
	dir, err := os.MkdirTemp("", "azgate-bench-gslb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	mmdb := filepath.Join(dir, "gslb-test.mmdb")
	if err := WriteMMDB(mmdb); err != nil {
		return nil, err
	}
	// dnsperf's query file, written now: once the directory is the
	// servers' user's, the bench writes nothing in it by name but its
	// own new files (newFile).
	qfile := filepath.Join(dir, "queries.txt")
	if err := os.WriteFile(qfile, []byte("pathd.example A\n"), 0o600); err != nil {
		return nil, err
	}
	// VIP listeners, one port for all three (gdnsd's tcp_connect has one
	// port per service type).
	var vipAddrs []netip.Addr
	for _, r := range Regions {
		vipAddrs = append(vipAddrs, r.VIP)
	}
	vport, err := freePort(vipAddrs...)
	if err != nil {
		return nil, err
	}
	o.Probe.Port = vport
	vips := map[string]*vip{}
	for _, r := range Regions {
		v := &vip{addr: netip.AddrPortFrom(r.VIP, vport)}
		if err := v.open(); err != nil {
			return nil, err
		}
		defer v.close()
		vips[r.Name] = v
	}
	oport, err := freePort(OurAddr)
	if err != nil {
		return nil, err
	}
	gport, err := freePort(GdnsdAddr)
	if err != nil {
		return nil, err
	}
	ourAP, gdAP := netip.AddrPortFrom(OurAddr, oport), netip.AddrPortFrom(GdnsdAddr, gport)
	confDir, _, err := WriteGdnsdConfig(dir, gdAP, mmdb, o.Probe, o.Threads)
	if err != nil {
		return nil, err
	}
	if o.User != "" {
		if err := chownAll(dir, o.uid, o.gid); err != nil {
			return nil, err
		}
	}
	ours, err := startOurs(ctx, &o, dir, ourAP, mmdb)
	if err != nil {
		return nil, err
	}
	if o.CPUProfile != "" {
		// Deferred before ours.stop, so it runs after: the profile is
		// complete once the server has exited.
		defer func() {
			b, cerr := readOwn(filepath.Join(dir, cpuProfileName), o.uid)
			if cerr == nil {
				cerr = os.WriteFile(o.CPUProfile, b, 0o644)
			}
			if cerr != nil && err == nil {
				err = fmt.Errorf("cpu profile: %w", cerr)
			}
		}()
	}
	defer ours.stop()
	gd, err := startGdnsd(ctx, &o, confDir, gdAP)
	if err != nil {
		return nil, err
	}
	defer gd.stop()
	servers := [2]*server{ours, gd}

	// Correctness first: the same region's VIP from both, our scope right.
	if rep.Checks, err = checkAll(ctx, ourAP, gdAP); err != nil {
		return rep, err
	}
	o.Out("checks: %d client subnets, both servers answer each with its region's VIP; our ECS scopes match the database", len(rep.Checks))

	spec := func(s *server, d time.Duration, rate int) loadSpec {
		return loadSpec{server: s.addr, queries: qfile, duration: d, rate: rate, inflight: o.Inflight,
			clientCPU: o.ClientCPUs, dnsperf: o.Dnsperf, taskset: o.taskset}
	}
	for round := range o.Rounds {
		var pair [2]Load
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			l, err := measure(ctx, servers[i], spec(servers[i], o.Duration, 0))
			if err != nil {
				return rep, err
			}
			o.Out("round %d: %-6s %8.0f q/s  mean %.3f ms  p99 %.3f ms  lost %d (timeouts %d, server rcvbuf drops %d)  %.2f µs CPU/q  busy %.0f %%  waited for a CPU %.0f %%",
				round+1, l.Server, l.QPS, l.MeanLatency*1e3, l.P99Latency*1e3, l.Lost, l.Timeouts, l.RcvbufDrops, l.CPUPerQuery, l.Busy, l.Wait)
			pair[i] = l
		}
		rep.Rounds = append(rep.Rounds, pair)
	}
	if o.Rate > 0 {
		for i, s := range servers {
			l, err := measure(ctx, s, spec(s, o.Duration, o.Rate))
			if err != nil {
				return rep, err
			}
			o.Out("at %d q/s: %-6s %8.0f q/s  mean %.3f ms  p99 %.3f ms  lost %d  %.2f µs CPU/q",
				o.Rate, l.Server, l.QPS, l.MeanLatency*1e3, l.P99Latency*1e3, l.Lost, l.CPUPerQuery)
			rep.Fixed[i] = l
		}
	}
	if o.FailoverReps > 0 {
		if err := failover(ctx, &o, rep, vips, ourAP, gdAP); err != nil {
			return rep, err
		}
	}
	// A server that died during the run invalidates it.
	for _, s := range servers {
		select {
		case <-s.exited:
			return rep, fmt.Errorf("%s exited during the run: %v: %s", s.name, s.err, tail(s.stderr.String(), 2000))
		default:
		}
	}
	return rep, nil
}

// chownAll hands the run's directory to the servers' user, so they can
// read their configuration and the database and gdnsd can write its run
// and state directories. The directory stays 0700: no one else reads it.
func chownAll(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// newFile writes a file that must not exist yet (no symlink followed) in
// the run's directory, owned by uid/gid: the directory is the servers'
// user's, who could have put a link at that name.
func newFile(path string, b []byte, uid, gid int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && uid != os.Geteuid() {
		err = f.Chown(uid, gid)
	}
	return errors.Join(err, f.Close())
}

// readOwn reads a regular file that uid owns, not following a symlink:
// what the servers' user wrote in the run's directory, never a file of
// someone else's linked there.
func readOwn(path string, uid int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(st.Uid) != uid {
		return nil, fmt.Errorf("%s: not a regular file of uid %d", path, uid)
	}
	return io.ReadAll(f)
}

func gdnsdVersion(bin string) string {
	out, _ := exec.Command(bin, "-V").CombinedOutput() // an unknown option: it prints its version and usage
	if m := regexp.MustCompile(`gdnsd version (\S+)`).FindSubmatch(out); m != nil {
		return "gdnsd " + string(m[1])
	}
	return "gdnsd"
}

// measure runs one load against s and reads s's CPU time around it.
func measure(ctx context.Context, s *server, l loadSpec) (Load, error) {
	c0, err := s.cpu()
	if err != nil {
		return Load{}, err
	}
	w0, err := s.runqueueWait()
	if err != nil {
		return Load{}, err
	}
	d0, err := udpDrops(s.addr)
	if err != nil {
		return Load{}, err
	}
	t0 := time.Now()
	rs, err := runLoad(ctx, l)
	wall := time.Since(t0)
	if err != nil {
		return Load{}, fmt.Errorf("%s: %w", s.name, err)
	}
	c1, err := s.cpu()
	if err != nil {
		return Load{}, err
	}
	w1, err := s.runqueueWait()
	if err != nil {
		return Load{}, err
	}
	d1, err := udpDrops(s.addr)
	if err != nil {
		return Load{}, err
	}
	out := Load{Server: s.name, Rcodes: map[string]int{}, RcvbufDrops: d1 - d0}
	var lat []float64
	var sum float64
	for _, r := range rs {
		out.QPS += r.QPS
		out.Sent += r.Sent
		out.Completed += r.Completed
		out.Lost += r.Lost
		out.Timeouts += r.Timeouts
		for k, v := range r.Rcodes {
			out.Rcodes[k] += v
		}
		lat = append(lat, r.Latencies...)
		for _, x := range r.Latencies {
			sum += x
		}
	}
	if out.Completed == 0 {
		return out, fmt.Errorf("%s: dnsperf got no answers (sent %d)", s.name, out.Sent)
	}
	if out.Rcodes["NOERROR"] != out.Completed {
		return out, fmt.Errorf("%s: answers other than NOERROR under load: %v", s.name, out.Rcodes)
	}
	out.MeanLatency = sum / float64(len(lat))
	out.P99Latency = percentile(lat, 99)
	cpu := c1 - c0
	out.CPU = cpu.Seconds()
	out.CPUPerQuery = cpu.Seconds() * 1e6 / float64(out.Completed)
	out.Busy = 100 * cpu.Seconds() / wall.Seconds()
	out.Wait = 100 * (w1 - w0).Seconds() / wall.Seconds()
	return out, nil
}

// checkAll asks both servers for pathd.example. A from each region's
// IPv4 /24, a host address in it, and its IPv6 /48, and for a static
// record; it retries for up to 10 s (gdnsd's first probe round, ours)
// and then fails with the first mismatch.
func checkAll(ctx context.Context, ours, gd netip.AddrPort) ([]Check, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs, err := checkOnce(ours, gd)
		if err == nil || time.Now().After(deadline) {
			return cs, err
		}
		select {
		case <-ctx.Done():
			return cs, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func checkOnce(ours, gd netip.AddrPort) ([]Check, error) {
	var cs []Check
	for _, r := range Regions {
		host := netip.PrefixFrom(r.Client.Addr().Next().Next(), 32)
		for _, cl := range []netip.Prefix{r.Client, host, r.Client6} {
			c := Check{Client: cl, Want: r.VIP}
			var ok1, ok2 bool
			mo, err := ask(ours, GSLBName, dns.TypeA, cl)
			if err != nil {
				return cs, fmt.Errorf("check: azgate, client %s: %w", cl, err)
			}
			mg, err := ask(gd, GSLBName, dns.TypeA, cl)
			if err != nil {
				return cs, fmt.Errorf("check: gdnsd, client %s: %w", cl, err)
			}
			c.Ours, ok1 = firstA(mo)
			c.Gdns, ok2 = firstA(mg)
			c.OurScope, c.GdnsScope = scopeOf(mo), scopeOf(mg)
			cs = append(cs, c)
			if !ok1 || c.Ours != r.VIP {
				return cs, fmt.Errorf("check: azgate answers client %s (%s) with %v, want %s: %v", cl, r.Name, c.Ours, r.VIP, mo.Answer)
			}
			if !ok2 || c.Gdns != r.VIP {
				return cs, fmt.Errorf("check: gdnsd answers client %s (%s) with %v, want %s: %v", cl, r.Name, c.Gdns, r.VIP, mg.Answer)
			}
			// The database's record is the /24 (IPv4) or /48 (IPv6).
			want := r.Client.Bits()
			if cl.Addr().Is6() {
				want = r.Client6.Bits()
			}
			if c.OurScope != want {
				return cs, fmt.Errorf("check: azgate's ECS scope for client %s is %d, want %d (the database record's prefix)", cl, c.OurScope, want)
			}
			if mo.Answer[0].Header().Ttl != GSLBTTL {
				return cs, fmt.Errorf("check: azgate's TTL for %s is %d, want %d", GSLBName, mo.Answer[0].Header().Ttl, GSLBTTL)
			}
		}
	}
	// A static record: the same answer, scope 0 from us (RFC 7871 §7.2.1).
	ecs := Regions[0].Client
	mo, err := ask(ours, "www.example.", dns.TypeA, ecs)
	if err != nil {
		return cs, fmt.Errorf("check: azgate, www.example.: %w", err)
	}
	mg, err := ask(gd, "www.example.", dns.TypeA, ecs)
	if err != nil {
		return cs, fmt.Errorf("check: gdnsd, www.example.: %w", err)
	}
	a1, _ := firstA(mo)
	a2, _ := firstA(mg)
	if a1 != a2 || !a1.IsValid() || scopeOf(mo) != 0 {
		return cs, fmt.Errorf("check: www.example. A: azgate %v (scope %d), gdnsd %v", a1, scopeOf(mo), a2)
	}
	return cs, nil
}

// failover closes one region's VIP listener per repetition (cycling
// through the regions) after a random delay within one probe interval (so
// the close falls anywhere in both servers' probe cycles), polls both
// servers every 10 ms with a client from that region until the answer is
// the next region's VIP, then reopens the listener and waits until both
// answer with the region's own VIP again.
func failover(ctx context.Context, o *Options, rep *Report, vips map[string]*vip, ours, gd netip.AddrPort) error {
	p := o.Probe
	downBy := time.Duration(p.Fall+1)*p.Interval + p.Timeout + 5*time.Second
	upBy := time.Duration(p.Rise+1)*p.Interval + p.Timeout + 5*time.Second
	for i := range o.FailoverReps {
		r := Regions[i%len(Regions)]
		next := region(r.Next)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rand.N(p.Interval)):
		}
		t0 := time.Now()
		vips[r.Name].close()
		d, err := waitBoth(ctx, [2]netip.AddrPort{ours, gd}, r.Client, next.VIP, t0, downBy)
		if err != nil {
			return fmt.Errorf("failover %d (%s down): %w", i+1, r.Name, err)
		}
		// Reopen after another random delay: right now is just after
		// the slower server's probe tick, which would favour the other.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rand.N(p.Interval)):
		}
		if err := vips[r.Name].open(); err != nil {
			return err
		}
		t1 := time.Now()
		u, err := waitBoth(ctx, [2]netip.AddrPort{ours, gd}, r.Client, r.VIP, t1, upBy)
		if err != nil {
			return fmt.Errorf("failover %d (%s back): %w", i+1, r.Name, err)
		}
		for k := range 2 {
			rep.Failover[k] = append(rep.Failover[k], d[k])
			rep.Recovery[k] = append(rep.Recovery[k], u[k])
		}
		rep.FailoverRegions = append(rep.FailoverRegions, r.Name)
		o.Out("failover %d: %s down: azgate moved in %v, gdnsd in %v; back: azgate %v, gdnsd %v",
			i+1, r.Name, d[0].Round(time.Millisecond), d[1].Round(time.Millisecond),
			u[0].Round(time.Millisecond), u[1].Round(time.Millisecond))
	}
	return nil
}

// waitBoth polls each server every 10 ms with client's subnet until its
// answer is want; the time is from t0 to the receipt of that answer.
func waitBoth(ctx context.Context, srv [2]netip.AddrPort, client netip.Prefix, want netip.Addr, t0 time.Time, within time.Duration) ([2]time.Duration, error) {
	var out [2]time.Duration
	errs := make(chan error, 2)
	for k, s := range srv {
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var last string
			for {
				if m, err := ask(s, GSLBName, dns.TypeA, client); err == nil {
					a, _ := firstA(m)
					if a == want {
						out[k] = time.Since(t0)
						errs <- nil
						return
					}
					last = a.String()
				} else {
					last = err.Error()
				}
				if time.Since(t0) > within {
					errs <- fmt.Errorf("%s still answers %s for client %s after %v, want %s", s, last, client, within, want)
					return
				}
				select {
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				case <-tick.C:
				}
			}
		}()
	}
	return out, errors.Join(<-errs, <-errs)
}

// median and max of durations, in seconds.
func durStats(ds []time.Duration) (med, mx float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return m.Seconds(), s[n-1].Seconds()
}

// medianRound is the round whose summed qps ratio is the median, per
// server: each server's round with its median qps.
func (r *Report) medianRound() [2]Load {
	var out [2]Load
	for k := range 2 {
		ls := make([]Load, 0, len(r.Rounds))
		for _, p := range r.Rounds {
			ls = append(ls, p[k])
		}
		slices.SortFunc(ls, func(a, b Load) int {
			switch {
			case a.QPS < b.QPS:
				return -1
			case a.QPS > b.QPS:
				return 1
			}
			return 0
		})
		if len(ls) > 0 {
			out[k] = ls[len(ls)/2]
		}
	}
	return out
}

func perCPU(l Load) float64 {
	if l.CPUPerQuery == 0 {
		return 0
	}
	return 1e6 / l.CPUPerQuery
}

// Results are the report as bench results: ours as the value, gdnsd as
// the baseline, ratio ours/gdnsd.
func (r *Report) Results() []bench.Result {
	gv := r.GdnsdVersion
	o := r.Options
	pin := fmt.Sprintf("servers on CPU %q, dnsperf on CPU %q (taskset), %d server thread(s) (GOMAXPROCS / udp_threads)", o.ServerCPUs, o.ClientCPUs, o.Threads)
	var rs []bench.Result
	add := func(name string, ours, gd float64, unit, note, target string) {
		ratio := 0.0
		if gd != 0 {
			ratio = ours / gd
		}
		rs = append(rs, bench.Result{Suite: "gslb", Name: name, Value: ours, Unit: unit,
			Baseline: gv, BaselineValue: gd, Ratio: ratio, Note: note, Target: target})
	}
	if len(r.Rounds) > 0 {
		m := r.medianRound()
		note := fmt.Sprintf("dnsperf -q %d, 3 processes at once (one ECS /24 per region: dnsperf sends one EDNS option per run), pathd.example A, %v per server per round, median of %d rounds (servers alternate order); %s; load before the run %s",
			o.Inflight, o.Duration, len(r.Rounds), pin, r.Load)
		add("qps (saturation)", m[0].QPS, m[1].QPS, "q/s", note, "≥ 1.0× gdnsd")
		add("p99 latency (saturation)", m[0].P99Latency*1e3, m[1].P99Latency*1e3, "ms", "", "")
		add("mean latency (saturation)", m[0].MeanLatency*1e3, m[1].MeanLatency*1e3, "ms", "", "")
		add("lost queries (saturation)", float64(m[0].Lost), float64(m[1].Lost), "queries", "", "")
		add("CPU per query (saturation)", m[0].CPUPerQuery, m[1].CPUPerQuery, "µs", "server process user+system CPU time (/proc/PID/stat, all threads) during the run / answered queries", "")
		add("q/s per server CPU-second (saturation)", perCPU(m[0]), perCPU(m[1]), "q/s", "1 / CPU per query: what one fully used CPU would answer at this cost, the capacity comparison that does not depend on who was the limit", "≥ 1.0× gdnsd")
		add("server CPU busy (saturation)", m[0].Busy, m[1].Busy, "%", "CPU time / wall time: 100 % = one CPU's worth", "")
		add("server waited for a CPU (saturation)", m[0].Wait, m[1].Wait, "%", "time the server's threads were runnable but not running (/proc/PID/task/*/schedstat) / wall time: other work on its CPU; busy + waited well below 100 % means dnsperf was the limit", "")
	}
	if r.Fixed[0].Completed > 0 {
		n := fmt.Sprintf(" at %d q/s", o.Rate)
		add("p99 latency"+n, r.Fixed[0].P99Latency*1e3, r.Fixed[1].P99Latency*1e3, "ms",
			fmt.Sprintf("dnsperf -Q %d per region process, %v per server", o.Rate/len(Regions), o.Duration), "")
		add("mean latency"+n, r.Fixed[0].MeanLatency*1e3, r.Fixed[1].MeanLatency*1e3, "ms", "", "")
		add("lost queries"+n, float64(r.Fixed[0].Lost), float64(r.Fixed[1].Lost), "queries", "", "")
		add("CPU per query"+n, r.Fixed[0].CPUPerQuery, r.Fixed[1].CPUPerQuery, "µs", "", "")
	}
	if len(r.Failover[0]) > 0 {
		p := o.Probe
		note := fmt.Sprintf("TCP connect probe of each VIP (a loopback listener the bench closes): interval %v, timeout %v, fall %d, rise %d on both (gdnsd tcp_connect down_thresh %d, ok_thresh 1, up_thresh %d); %d repetitions over regions %v; polled every 10 ms with an ECS client of the region",
			p.Interval, p.Timeout, p.Fall, p.Rise, p.Fall, p.Rise, len(r.Failover[0]), r.FailoverRegions)
		m0, x0 := durStats(r.Failover[0])
		m1, x1 := durStats(r.Failover[1])
		add("failover time median", m0, m1, "s", note, "")
		add("failover time max", x0, x1, "s", "", "")
		m0, x0 = durStats(r.Recovery[0])
		m1, x1 = durStats(r.Recovery[1])
		add("recovery time median", m0, m1, "s", "listener reopened until the region's own VIP is answered again", "")
		add("recovery time max", x0, x1, "s", "", "")
	}
	return rs
}
