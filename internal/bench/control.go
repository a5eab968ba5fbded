package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
)

// ControlOptions tune the control-plane suite.
type ControlOptions struct {
	Binary string // azgate binary for the lab's roles and the loaded edge (default: lab.DefaultBinary)
	Binds  int    // bind calls timed
	EIPs   int    // EIPs of the load test (0: skip it)
	Out    func(format string, a ...any)
}

// Control measures (1) the time from a bind API call to the edge's route
// map holding the new binding, in the lab, next to the API call's own
// latency; (2) loading EIPs at scale: a controller apply of o.EIPs bound
// EIPs, then an edge started from nothing until its map holds them all,
// with the edge's peak RSS.
func Control(ctx context.Context, o ControlOptions) ([]Result, error) {
	if o.Binds == 0 {
		o.Binds = 200
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	out, err := bindLatency(ctx, o, say)
	if err != nil {
		return nil, err
	}
	if o.EIPs > 0 {
		rs, err := loadScale(ctx, o, say)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

func bindLatency(ctx context.Context, o ControlOptions, say func(string, ...any)) ([]Result, error) {
	cfg := benchLab(o.Binary)
	if err := cfg.CheckBinaries(); err != nil {
		return nil, err
	}
	lab.Down(cfg)
	say("bringing up a lab (prefix %s)", cfg.Prefix)
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer lab.Down(cfg)
	c, err := l.Client()
	if err != nil {
		return nil, err
	}
	pin := dataplane.NodePinDir(cfg.Prefix + "edge-a1")
	eip := netip.MustParseAddr("198.51.100.7")
	targets := []struct {
		host, guest string
		underlay    netip.Addr
	}{
		{"az1-h1", "g1", lab.HostUnderlay(1, 1)},
		{"az2-h1", "g1", lab.HostUnderlay(2, 1)},
		{"az3-h2", "g2", lab.HostUnderlay(3, 2)},
	}
	var prop, call []float64
	for i := 0; i < o.Binds; i++ {
		t := targets[i%len(targets)]
		t0 := time.Now()
		if _, err := c.BindEIP(ctx, eip.String(), t.host, t.guest); err != nil {
			return nil, err
		}
		call = append(call, float64(time.Since(t0))/1e6)
		for {
			rt, ok, err := dataplane.PinnedRoute(pin, eip)
			if err != nil {
				return nil, err
			}
			if ok && rt.Host == t.underlay {
				break
			}
			if time.Since(t0) > 10*time.Second {
				return nil, fmt.Errorf("bind %d: the edge did not program %v -> %v within 10s", i, eip, t.underlay)
			}
			time.Sleep(20 * time.Microsecond)
		}
		prop = append(prop, float64(time.Since(t0))/1e6)
	}
	cp50 := percentile(call, 50)
	say("%d binds: API call p50 %.2f ms; edge map p50 %.2f ms p99 %.2f ms", o.Binds, cp50, percentile(prop, 50), percentile(prop, 99))
	return []Result{
		{Suite: "control", Name: "bind_api_call_p50", Value: cp50, Unit: "ms"},
		{Suite: "control", Name: "bind_to_edge_map_p50", Value: percentile(prop, 50), Unit: "ms", Baseline: "bind_api_call_p50", BaselineValue: cp50, Ratio: percentile(prop, 50) / cp50},
		{Suite: "control", Name: "bind_to_edge_map_p99", Value: percentile(prop, 99), Unit: "ms", Baseline: "bind_api_call_p50", BaselineValue: cp50, Ratio: percentile(prop, 99) / cp50, Target: "<= 100 ms"},
	}, nil
}

// loadScale applies o.EIPs bound EIPs (from 100.64.0.0/10, as no
// documentation or benchmarking range holds a million addresses; they
// only ever exist as map keys in a namespace with no route anywhere) and
// times an edge started from nothing until its map holds them all.
func loadScale(ctx context.Context, o ControlOptions, say func(string, ...any)) ([]Result, error) {
	const guestsPerHost = 1000
	hosts := (o.EIPs + guestsPerHost - 1) / guestsPerHost
	if o.EIPs > 1<<22 {
		return nil, fmt.Errorf("at most %d EIPs (100.64.0.0/10)", 1<<22)
	}
	dir, err := os.MkdirTemp("", "azgate-load")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := controller.Start(ctx, controller.Config{DataDir: dir, Listen: "", ListenUnix: filepath.Join(dir, "api.sock"), Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	c := client.New("unix://"+filepath.Join(dir, "api.sock"), srv.Token())

	doc := &model.Document{AZs: []model.AZ{{Name: "az1"}}}
	for h := 0; h < hosts; h++ {
		host := model.Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})}
		for g := 0; g < guestsPerHost; g++ {
			host.Guests = append(host.Guests, model.Guest{Name: fmt.Sprintf("g%d", g),
				Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(model.VSIDMin + g)})
		}
		doc.Hosts = append(doc.Hosts, host)
	}
	doc.EdgeSets = []model.EdgeSet{{Name: "load", Prefixes: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")},
		Edges: []model.EdgeNode{{Name: "load-edge", Underlay: netip.MustParseAddr("198.19.255.1")}}}}
	for i := 0; i < o.EIPs; i++ {
		a := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)})
		doc.EIPs = append(doc.EIPs, model.EIP{Address: a, Binding: &model.Binding{Host: fmt.Sprintf("h%d", i/guestsPerHost), Guest: fmt.Sprintf("g%d", i%guestsPerHost)}})
	}
	say("applying %d hosts and %d bound EIPs through the API", hosts, o.EIPs)
	t0 := time.Now()
	if _, err := c.Apply(ctx, doc); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	applyS := time.Since(t0).Seconds()
	say("apply took %.1f s", applyS)
	doc = nil

	// The edge, in a namespace of its own with nothing but a veth.
	const prefix = "azc-"
	node, err := netlab.NewNode(prefix + "load")
	if err != nil {
		return nil, err
	}
	defer node.Delete()
	peer, err := netlab.NewNode(prefix + "loadp")
	if err != nil {
		return nil, err
	}
	defer peer.Delete()
	if err := netlab.Veth(netlab.End{Node: node, Dev: "v0"}, netlab.End{Node: peer, Dev: "v1"}, 1500); err != nil {
		return nil, err
	}
	if err := node.Addr("v0", "198.19.255.1/24"); err != nil {
		return nil, err
	}
	pin := dataplane.NodePinDir(prefix + "load-edge")
	dataplane.RemovePins(pin)
	defer dataplane.RemovePins(pin)
	bin := o.Binary
	if bin == "" {
		if bin, err = lab.DefaultBinary(); err != nil {
			return nil, err
		}
	}
	logf, err := os.Create(filepath.Join(dir, "edge.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := netns.Command(node.Name, bin, "edge", "--name", "load-edge", "--attach", "v0", "--etcd-endpoints", "unix://"+filepath.Join(dir, "etcd.sock"),
		"--pin-dir", pin, "--eip-max", strconv.Itoa(o.EIPs+o.EIPs/10), "--metrics-listen", "")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), os.Getenv("AZGATE_BENCH_EDGE_ENV"))
	say("starting an edge from nothing")
	t1 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var loadS float64
	for {
		n, err := dataplane.CountPinnedRoutes(pin)
		if err == nil && n >= o.EIPs {
			loadS = time.Since(t1).Seconds()
			break
		}
		if time.Since(t1) > 5*time.Minute {
			return nil, fmt.Errorf("the edge holds %d of %d routes after 5 minutes (log %s)", n, o.EIPs, logf.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
	hwm, rss := procMem(cmd.Process.Pid)
	say("edge holds %d routes %.1f s after start; peak RSS %.0f MB", o.EIPs, loadS, hwm)
	return []Result{
		{Suite: "control", Name: fmt.Sprintf("apply_%d_eips", o.EIPs), Value: applyS, Unit: "s"},
		{Suite: "control", Name: fmt.Sprintf("edge_load_%d_routes", o.EIPs), Value: loadS, Unit: "s", Target: "<= 30 s"},
		{Suite: "control", Name: "edge_peak_rss", Value: hwm, Unit: "MB", Target: "<= 512 MB"},
		{Suite: "control", Name: "edge_rss_after_load", Value: rss, Unit: "MB"},
	}, nil
}

// procMem returns a process's peak and current resident memory in MB.
func procMem(pid int) (hwm, rss float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmHWM:":
			hwm = kb / 1024
		case "VmRSS:":
			rss = kb / 1024
		}
	}
	return hwm, rss
}
