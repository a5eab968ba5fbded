package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/azgate/azgate/packaging"
)

// The lab's metrics (issue 20): every role serves /metrics on the
// loopback of the namespace it runs in, where nothing outside that
// namespace reaches it (not the Internet client, not the other nodes).
// The lab's Prometheus (Debian's prometheus, lab prometheus up) runs in
// the machine's namespace on 127.0.0.1 and scrapes them through the lab's
// metrics proxy (lab metrics-proxy, also on the machine's 127.0.0.1): an
// HTTP proxy that knows only the lab's targets and opens each connection
// inside the target's namespace, as lab exec would. The controller's
// /metrics is on its API's unix socket (mode 0600 in the state dir).
const (
	// EdgeMetricsPort and AgentMetricsPort are the edges' and agents'
	// --metrics-listen port, on their namespace's 127.0.0.1.
	EdgeMetricsPort  = 9464
	AgentMetricsPort = 9465
	// bwMetricsPortBase + i is the i-th bandwidth manager's port when it
	// runs in a host's namespace; a manager in the machine's namespace
	// takes a free loopback port.
	bwMetricsPortBase = 9470
	// DefaultPrometheusListen and DefaultMetricsProxyListen are where
	// lab prometheus up puts Prometheus and the proxy.
	DefaultPrometheusListen   = "127.0.0.1:9491"
	DefaultMetricsProxyListen = "127.0.0.1:9492"
	// ScrapeInterval is the lab Prometheus' scrape and rule interval.
	ScrapeInterval = 5 * time.Second
	// metricsBodyMax bounds one scrape the proxy relays.
	metricsBodyMax = 64 << 20
)

// bwMetricsAddr is the i-th bandwidth manager's --metrics-listen.
func bwMetricsAddr(ns string, i int) (string, error) {
	if ns != "" {
		return fmt.Sprintf("127.0.0.1:%d", bwMetricsPortBase+i), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("lab: a loopback port for a bandwidth manager's /metrics: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// MetricsTarget is one /metrics the lab's Prometheus scrapes.
type MetricsTarget struct {
	Job  string `json:"job"`  // edge, agent, controller, bwmgr
	Node string `json:"node"` // its node label (edges and agents label their series with it themselves)
	// Addr is the address Prometheus scrapes, through the proxy:
	// NAME:PORT, a name only the proxy resolves.
	Addr  string `json:"addr"`
	Netns string `json:"netns,omitempty"` // where it listens ("": the machine's namespace)
	// Dial is what the proxy connects to there: HOST:PORT, or
	// unix:PATH.
	Dial string `json:"dial"`
}

// MetricsTargets are every role's /metrics: the controller, the edges,
// the agents and the bandwidth managers.
func (l *Lab) MetricsTargets() []MetricsTarget {
	out := []MetricsTarget{{Job: "controller", Node: "controller", Addr: "controller:80", Dial: "unix:" + l.apiSock()}}
	for _, n := range l.Topo.NodesByRole("edge") {
		out = append(out, MetricsTarget{Job: "edge", Node: n.Name, Addr: fmt.Sprintf("%s:%d", n.Name, EdgeMetricsPort),
			Netns: n.Netns, Dial: fmt.Sprintf("127.0.0.1:%d", EdgeMetricsPort)})
	}
	for _, n := range l.Topo.NodesByRole("host") {
		out = append(out, MetricsTarget{Job: "agent", Node: n.Name, Addr: fmt.Sprintf("%s:%d", n.Name, AgentMetricsPort),
			Netns: n.Netns, Dial: fmt.Sprintf("127.0.0.1:%d", AgentMetricsPort)})
	}
	for _, m := range l.bw.Managers {
		addr := flagValue(m.Args, "--metrics-listen")
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue // started before the lab set one
		}
		out = append(out, MetricsTarget{Job: "bwmgr", Node: "bwmgr-" + m.Name, Addr: "bwmgr-" + m.Name + ":" + port, Netns: m.Netns, Dial: addr})
	}
	return out
}

// flagValue is the last value of flag in args ("--flag value" or
// "--flag=value"), or "".
func flagValue(args []string, flag string) string {
	v := ""
	for i, a := range args {
		switch {
		case a == flag && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, flag+"="):
			v = a[len(flag)+1:]
		}
	}
	return v
}

// MetricsProxy is the HTTP proxy the lab's Prometheus scrapes through: a
// GET of http://ADDR/metrics for a target's Addr is answered from that
// target's /metrics, fetched inside its namespace. Anything else is
// refused: it reaches the lab's metrics and nothing more.
type MetricsProxy struct {
	targets map[string]MetricsTarget
	token   string // the controller's API token (for --metrics-auth)
	client  *http.Client
}

// NewMetricsProxy makes the proxy of the lab's targets.
func (l *Lab) NewMetricsProxy() *MetricsProxy {
	p := &MetricsProxy{targets: map[string]MetricsTarget{}}
	for _, t := range l.MetricsTargets() {
		p.targets[t.Addr] = t
	}
	if b, err := os.ReadFile(l.tokenFile()); err == nil {
		p.token = strings.TrimSpace(string(b))
	}
	p.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			t, ok := p.targets[addr]
			if !ok {
				return nil, fmt.Errorf("%s is no lab metrics target", addr)
			}
			if path, ok := strings.CutPrefix(t.Dial, "unix:"); ok {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}
			if t.Netns == "" {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", t.Dial)
			}
			return Dialer(t.Netns)(ctx, "tcp", t.Dial)
		},
		DisableCompression:    true, // relay the target's encoding as it is
		ResponseHeaderTimeout: 20 * time.Second,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       time.Minute,
	}}
	// A redirect is relayed, never followed: the proxy fetches /metrics
	// of its targets and nothing else, whatever a target (or a process
	// on a stopped target's loopback port) answers.
	p.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return p
}

func (p *MetricsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, ok := p.targets[r.URL.Host]
	switch {
	case r.Method != http.MethodGet:
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	case !ok || r.URL.Path != "/metrics":
		http.Error(w, fmt.Sprintf("%q is not a lab metrics target's http://NODE:PORT/metrics", r.URL.String()), http.StatusNotFound)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+t.Addr+"/metrics", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, h := range []string{"Accept", "Accept-Encoding", "X-Prometheus-Scrape-Timeout-Seconds"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if t.Job == "controller" && p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, fmt.Sprintf("%s (%s): %v", t.Node, t.Job, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Encoding"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, metricsBodyMax))
}

// ServeMetricsProxy serves the lab's metrics proxy on listen until ctx
// ends.
func (l *Lab) ServeMetricsProxy(ctx context.Context, listen string) error {
	if err := loopbackAddr(listen); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: l.NewMetricsProxy(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loopbackAddr refuses an address that is not HOST:PORT on loopback.
func loopbackAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: want a loopback address (127.0.0.1:PORT): the lab's Prometheus and its proxy stay on this machine", addr)
	}
	return nil
}

// PrometheusConfig is how lab prometheus up runs Prometheus.
type PrometheusConfig struct {
	Listen      string // Prometheus' web and API address; default DefaultPrometheusListen
	ProxyListen string // the metrics proxy's; default DefaultMetricsProxyListen
	// Binary is Prometheus; default: prometheus on $PATH (Debian's).
	Binary string
}

// PrometheusState is a running lab Prometheus, as recorded in
// STATE_DIR/prometheus/state.json.
type PrometheusState struct {
	PID         int    `json:"pid"`
	ProxyPID    int    `json:"proxy_pid"`
	Listen      string `json:"listen"`
	ProxyListen string `json:"proxy_listen"`
	Dir         string `json:"dir"`
}

// URL is Prometheus' base URL.
func (s PrometheusState) URL() string { return "http://" + s.Listen }

func promDir(stateDir string) string { return filepath.Join(stateDir, "prometheus") }
func promStateFile(stateDir string) string {
	return filepath.Join(promDir(stateDir), "state.json")
}

// PrometheusStatus reads the running lab Prometheus' state.
func PrometheusStatus(cfg Config) (PrometheusState, error) {
	if err := cfg.defaults(); err != nil {
		return PrometheusState{}, err
	}
	var st PrometheusState
	b, err := os.ReadFile(promStateFile(cfg.StateDir))
	if err != nil {
		return st, fmt.Errorf("the lab's Prometheus is not up (reading %s: %w); run `azgate-lab lab prometheus up`", promStateFile(cfg.StateDir), err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", promStateFile(cfg.StateDir), err)
	}
	if !isPrometheus(st.PID, st.Dir) {
		return st, fmt.Errorf("the lab's Prometheus (pid %d) is not running; run `azgate-lab lab prometheus down` and `up` again", st.PID)
	}
	return st, nil
}

// scrapeConfig is Prometheus' configuration: one job per role, every
// target with its node label (honored from the scrape where the role sets
// it, as the edges and agents do), through the proxy; the alert rules.
func (l *Lab) scrapeConfig(proxyListen, rules string) ([]byte, error) {
	type static struct {
		Targets []string          `yaml:"targets"`
		Labels  map[string]string `yaml:"labels"`
	}
	type job struct {
		Name          string   `yaml:"job_name"`
		HonorLabels   bool     `yaml:"honor_labels"`
		ProxyURL      string   `yaml:"proxy_url"`
		MetricsPath   string   `yaml:"metrics_path"`
		StaticConfigs []static `yaml:"static_configs"`
	}
	var jobs []*job
	byName := map[string]*job{}
	for _, t := range l.MetricsTargets() {
		j := byName[t.Job]
		if j == nil {
			j = &job{Name: t.Job, HonorLabels: true, ProxyURL: "http://" + proxyListen, MetricsPath: "/metrics"}
			byName[t.Job] = j
			jobs = append(jobs, j)
		}
		j.StaticConfigs = append(j.StaticConfigs, static{Targets: []string{t.Addr}, Labels: map[string]string{"node": t.Node}})
	}
	iv := ScrapeInterval.String()
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": iv, "scrape_timeout": (ScrapeInterval - time.Second).String(), "evaluation_interval": iv,
			"external_labels": map[string]string{"lab": strings.TrimSuffix(l.Cfg.Prefix, "-")}},
		"rule_files":     []string{rules},
		"scrape_configs": jobs,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte("# azgate lab: Prometheus of the lab "+l.Cfg.Prefix+" (azgate-lab lab prometheus up; docs/lab.md)\n"), b...), nil
}

// PrometheusUp starts the metrics proxy and Prometheus (both detached,
// PIDs in STATE_DIR/prometheus/state.json), with a scrape of every role
// and the alert rules, its storage in STATE_DIR/prometheus/data, and
// waits until Prometheus is ready.
func (l *Lab) PrometheusUp(ctx context.Context, pc PrometheusConfig) (PrometheusState, error) {
	if pc.Listen == "" {
		pc.Listen = DefaultPrometheusListen
	}
	if pc.ProxyListen == "" {
		pc.ProxyListen = DefaultMetricsProxyListen
	}
	if pc.Binary == "" {
		pc.Binary = "prometheus"
	}
	for _, a := range []string{pc.Listen, pc.ProxyListen} {
		if err := loopbackAddr(a); err != nil {
			return PrometheusState{}, err
		}
	}
	bin, err := exec.LookPath(pc.Binary)
	if err != nil {
		return PrometheusState{}, fmt.Errorf("lab: %s not found: install Debian's prometheus (scripts/setup.sh does): %w", pc.Binary, err)
	}
	if st, err := PrometheusStatus(l.Cfg); err == nil {
		return st, fmt.Errorf("the lab's Prometheus is up already (pid %d, %s)", st.PID, st.URL())
	}
	stopPrometheus(l.Cfg.StateDir) // a half-started one
	dir := promDir(l.Cfg.StateDir)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return PrometheusState{}, err
	}
	rules := filepath.Join(dir, "azgate-rules.yml")
	if err := os.WriteFile(rules, packaging.AlertRules, 0o600); err != nil {
		return PrometheusState{}, err
	}
	conf, err := l.scrapeConfig(pc.ProxyListen, rules)
	if err != nil {
		return PrometheusState{}, err
	}
	confFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confFile, conf, 0o600); err != nil {
		return PrometheusState{}, err
	}
	st := PrometheusState{Listen: pc.Listen, ProxyListen: pc.ProxyListen, Dir: dir}
	save := func() error {
		b, _ := json.MarshalIndent(st, "", "  ")
		return os.WriteFile(promStateFile(l.Cfg.StateDir), b, 0o600)
	}
	fail := func(err error) (PrometheusState, error) {
		stopPrometheus(l.Cfg.StateDir)
		return PrometheusState{}, err
	}
	if st.ProxyPID, err = detach(filepath.Join(dir, "metrics-proxy.log"), l.Cfg.LabBinary, "lab", "metrics-proxy",
		"--prefix", l.Cfg.Prefix, "--state-dir", l.Cfg.StateDir, "--azgate", l.Cfg.Binary, "--listen", pc.ProxyListen); err != nil {
		return fail(err)
	}
	if err := save(); err != nil {
		return fail(err)
	}
	if err := waitHTTP(ctx, "http://"+pc.ProxyListen+"/", 15*time.Second, http.StatusNotFound); err != nil {
		return fail(fmt.Errorf("lab: the metrics proxy: %w (log: %s)", err, filepath.Join(dir, "metrics-proxy.log")))
	}
	if st.PID, err = detach(filepath.Join(dir, "prometheus.log"), bin, "--config.file="+confFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--storage.tsdb.retention.time=2d",
		"--web.listen-address="+pc.Listen); err != nil {
		return fail(err)
	}
	if err := save(); err != nil {
		return fail(err)
	}
	if err := waitHTTP(ctx, st.URL()+"/-/ready", 60*time.Second, http.StatusOK); err != nil {
		return fail(fmt.Errorf("lab: prometheus: %w (log: %s)", err, filepath.Join(dir, "prometheus.log")))
	}
	return st, nil
}

// detach starts argv in its own session, its output appended to logPath.
func detach(logPath string, argv ...string) (int, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("lab: start %s: %w", argv[0], err)
	}
	go cmd.Wait()
	return cmd.Process.Pid, nil
}

// waitHTTP waits until a GET of url answers want.
func waitHTTP(ctx context.Context, url string, timeout time.Duration, want int) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %v", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// PrometheusDown stops the lab's Prometheus and its proxy by their PIDs;
// its storage stays in the state dir until lab down.
func PrometheusDown(cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	return stopPrometheus(cfg.StateDir)
}

// stopPrometheus stops what state.json records, each only while its PID
// still runs what was started (Prometheus on the lab's storage, the proxy
// of this state dir), and removes state.json. Safe without either.
func stopPrometheus(stateDir string) error {
	b, err := os.ReadFile(promStateFile(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st PrometheusState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%s: %w", promStateFile(stateDir), err)
	}
	if isPrometheus(st.PID, st.Dir) {
		killWait(st.PID, 30*time.Second) // it flushes its head block
	}
	if st.ProxyPID > 0 && alive(st.ProxyPID) && cmdlineHas(st.ProxyPID, "metrics-proxy", stateDir) {
		killWait(st.ProxyPID, 10*time.Second)
	}
	return os.Remove(promStateFile(stateDir))
}

func isPrometheus(pid int, dir string) bool {
	return dir != "" && pid > 0 && alive(pid) && cmdlineHas(pid, "--storage.tsdb.path="+filepath.Join(dir, "data"))
}
