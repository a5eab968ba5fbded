//go:build !node

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "service", Aliases: []string{"svc"}, Short: "Load-balanced services: a VIP, listeners and pools of backends in any AZ"}
		c.AddCommand(serviceCreateCommand(), serviceBackendCommand(), serviceDrainCommand(), serviceWeightCommand(),
			serviceStatusCommand(), serviceLookupCommand())
		c.AddCommand(pullOutCommands(model.KindService)...)
		c.AddCommand(limitsCommand(model.KindService))
		c.AddCommand(objectCommands(model.KindService, describeService, serviceTable)...)
		return c
	})
}

func serviceCreateCommand() *cobra.Command {
	var (
		vip, mode, desc                    string
		tableSize                          uint32
		listeners, pools, backends, checks []string
		replace                            bool
	)
	create := &cobra.Command{
		Use:   "create NAME --vip ADDR --mode encap|nat --listener PROTO:PORTS=POOL ... --backend POOL=BACKEND ... [--health POOL=CHECK ...]",
		Short: "Create a service (see docs/cli.md for the flag syntax)",
		Example: `  azgate service create web --vip 198.51.100.20 --mode encap \
      --listener tcp:80=web --listener tcp:8000-8100=web --listener udp:any=dns \
      --backend web=az1-h1/g1:8080 --backend web=az2-h1/g1:8080@2 --backend dns=az1-h1/g2 \
      --health web=http:/healthz,interval=2s,fall=3
  azgate service create dmz --vip 198.51.100.30 --mode nat \
      --listener tcp:443=tls --backend tls=198.19.11.1:8443 --backend tls=198.19.11.2:8443 --health tls=tcp`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := &model.Service{Name: args[0], Mode: mode, Description: desc, TableSize: tableSize}
			var err error
			if v.VIP, err = parseAddr("--vip", vip); err != nil {
				return err
			}
			pool := func(name string) *model.Pool {
				if p, _ := v.Pool(name); p != nil {
					return p
				}
				v.Pools = append(v.Pools, model.Pool{Name: name})
				return &v.Pools[len(v.Pools)-1]
			}
			for _, p := range pools {
				pool(p)
			}
			for _, l := range listeners {
				lis, err := parseListener(l)
				if err != nil {
					return err
				}
				pool(lis.Pool)
				v.Listeners = append(v.Listeners, lis)
			}
			for _, b := range backends {
				name, spec, ok := strings.Cut(b, "=")
				if !ok || name == "" {
					return fmt.Errorf("--backend %q: want POOL=BACKEND, e.g. web=az1-h1/g1:8080@2 or web=198.19.11.1:8443", b)
				}
				be, err := parseBackend(spec)
				if err != nil {
					return fmt.Errorf("--backend %q: %w", b, err)
				}
				p := pool(name)
				p.Backends = append(p.Backends, be)
			}
			for _, h := range checks {
				name, hc, err := parseHealth(h)
				if err != nil {
					return err
				}
				p := pool(name)
				if p.Health != nil {
					return fmt.Errorf("--health %q: pool %s has a check already", h, name)
				}
				p.Health = hc
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			var res client.Result
			if replace {
				res, err = cl.PutService(cmd.Context(), v)
			} else {
				res, err = cl.CreateService(cmd.Context(), v)
			}
			if err != nil {
				return err
			}
			var stored model.Service
			if err := json.Unmarshal(res.Object, &stored); err != nil {
				return fmt.Errorf("service %s: decoding the stored service: %w", v.Name, err)
			}
			return writeResult(cmd, "service "+v.Name, res, &stored)
		},
	}
	f := create.Flags()
	f.StringVar(&vip, "vip", "", "the service's virtual IP (inside an edge set's prefix, not an EIP)")
	f.StringVar(&mode, "mode", "", "encap (NVGRE to guests on AZ hosts) or nat (DNAT to plain addresses)")
	f.StringVar(&desc, "description", "", "free text")
	f.Uint32Var(&tableSize, "table-size", 0, "Maglev table size per pool: a prime of at least 100 x the largest pool's backends and at most 8 x that (or 8 x 65537), within the set's table budget (default 65537)")
	f.StringArrayVar(&listeners, "listener", nil, "PROTO:PORTS=POOL: tcp:80=web, tcp:8000-8100=web, udp:any=dns (repeatable)")
	f.StringArrayVar(&pools, "pool", nil, "declare a pool (pools named by --listener, --backend and --health are declared too)")
	f.StringArrayVar(&backends, "backend", nil, "POOL=BACKEND: web=HOST/GUEST[:PORT][@WEIGHT] (encap) or web=ADDR[:PORT][@WEIGHT] (nat; an IPv6 ADDR with a port in brackets, [2001:db8::1]:8080) (repeatable)")
	f.StringArrayVar(&checks, "health", nil, "POOL=TYPE[:ARG][,KEY=VALUE...]: web=http:/healthz,interval=2s; tls=tcp; dns=udp:ping; x=command:NAME (a command the edges list with --health-command)")
	f.BoolVar(&replace, "replace", false, "replace the service if it exists (PUT) instead of failing")
	create.MarkFlagRequired("vip")
	create.MarkFlagRequired("mode")
	return create
}

// parseListener parses PROTO:PORTS=POOL with PORTS a port, FIRST-LAST or any.
func parseListener(s string) (model.Listener, error) {
	bad := func(why string) (model.Listener, error) {
		return model.Listener{}, fmt.Errorf("--listener %q: %s (want PROTO:PORTS=POOL, e.g. tcp:80=web, tcp:8000-8100=web, udp:any=dns)", s, why)
	}
	spec, pool, ok := strings.Cut(s, "=")
	if !ok || pool == "" {
		return bad("no pool")
	}
	proto, ports, ok := strings.Cut(spec, ":")
	if !ok || ports == "" {
		return bad("no ports")
	}
	l := model.Listener{Protocol: strings.ToLower(proto), Pool: pool}
	if ports == "any" || ports == "*" {
		return l, nil
	}
	first, last, isRange := strings.Cut(ports, "-")
	p, err := parsePort(first)
	if err != nil || p == 0 {
		return bad(fmt.Sprintf("port %q is not 1-65535 or any", first))
	}
	l.Port = p
	if isRange {
		e, err := parsePort(last)
		if err != nil || e == 0 {
			return bad(fmt.Sprintf("port %q is not 1-65535", last))
		}
		l.PortEnd = e
	}
	return l, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}

// parseBackend parses HOST/GUEST[:PORT][@WEIGHT] or ADDR[:PORT][@WEIGHT]
// (an IPv6 ADDR bare, or in brackets before a port: [ADDR]:PORT, as
// model.Backend.Key writes it).
func parseBackend(s string) (model.Backend, error) {
	var b model.Backend
	spec := s
	if at := strings.LastIndex(spec, "@"); at >= 0 {
		n, err := strconv.ParseUint(spec[at+1:], 10, 32)
		if err != nil {
			return b, fmt.Errorf("weight %q is not a number", spec[at+1:])
		}
		w := uint32(n)
		b.Weight = &w
		spec = spec[:at]
	}
	target, port, hasPort := strings.Cut(spec, ":")
	switch {
	case strings.HasPrefix(spec, "["):
		// An IPv6 nat backend with a port: [ADDRESS]:PORT.
		end := strings.Index(spec, "]")
		if end < 0 || (end+1 < len(spec) && spec[end+1] != ':') {
			return b, fmt.Errorf("%q: want [IPV6]:PORT", spec)
		}
		target, port, hasPort = spec[1:end], "", end+1 < len(spec)
		if hasPort {
			port = spec[end+2:]
		}
	case strings.Count(spec, ":") > 1:
		// A bare IPv6 address (its colons are no port).
		target, hasPort = spec, false
	}
	if hasPort {
		p, err := parsePort(port)
		if err != nil {
			return b, fmt.Errorf("port %q is not 0-65535", port)
		}
		b.Port = p
	}
	if host, guest, ok := strings.Cut(target, "/"); ok {
		if host == "" || guest == "" {
			return b, fmt.Errorf("%q: want HOST/GUEST", target)
		}
		b.Host, b.Guest = host, guest
		return b, nil
	}
	a, err := netip.ParseAddr(target)
	if err != nil {
		return b, fmt.Errorf("%q is neither HOST/GUEST (encap) nor an IP address (nat)", target)
	}
	b.Address = a
	return b, nil
}

// parseHealth parses POOL=TYPE[:ARG][,KEY=VALUE...]. ARG is the path of an
// http(s) check, the payload of a udp check and the name of a command
// check's command (one the edges list with --health-command); it ends at
// the first comma.
func parseHealth(s string) (string, *model.HealthCheck, error) {
	pool, spec, ok := strings.Cut(s, "=")
	if !ok || pool == "" || spec == "" {
		return "", nil, fmt.Errorf("--health %q: want POOL=TYPE[:ARG][,KEY=VALUE...], e.g. web=http:/healthz,interval=2s", s)
	}
	head, rest, hasRest := strings.Cut(spec, ",")
	typ, arg, hasArg := strings.Cut(head, ":")
	h := &model.HealthCheck{Type: strings.ToLower(typ)}
	if hasArg {
		switch h.Type {
		case model.CheckHTTP, model.CheckHTTPS:
			h.Path = arg
		case model.CheckUDP:
			h.Send = arg
		case model.CheckCommand:
			h.Command = model.CommandName(arg)
		default:
			return "", nil, fmt.Errorf("--health %q: a %s check takes no :ARG", s, typ)
		}
	}
	if !hasRest {
		return pool, h, nil
	}
	kv, err := keyValues("health", rest, "port", "path", "status", "send", "interval", "timeout", "rise", "fall")
	if err != nil {
		return "", nil, err
	}
	num := func(k string, bits int) (int64, error) {
		n, err := strconv.ParseInt(kv[k], 10, bits)
		if err != nil {
			return 0, fmt.Errorf("--health %q: %s %q is not a number", s, k, kv[k])
		}
		return n, nil
	}
	dur := func(k string) (model.Duration, error) {
		d, err := time.ParseDuration(kv[k])
		if err != nil {
			return 0, fmt.Errorf("--health %q: %s %q is not a duration such as 2s", s, k, kv[k])
		}
		return model.Duration(d), nil
	}
	for k, v := range kv {
		switch k {
		case "port":
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return "", nil, fmt.Errorf("--health %q: port %q is not 0-65535", s, v)
			}
			h.Port = uint16(n)
		case "path":
			h.Path = v
		case "send":
			h.Send = v
		case "status", "rise", "fall":
			n, err := num(k, 32)
			if err != nil {
				return "", nil, err
			}
			switch k {
			case "status":
				h.Status = int(n)
			case "rise":
				h.Rise = int(n)
			default:
				h.Fall = int(n)
			}
		case "interval", "timeout":
			d, err := dur(k)
			if err != nil {
				return "", nil, err
			}
			if k == "interval" {
				h.Interval = d
			} else {
				h.Timeout = d
			}
		}
	}
	return pool, h, nil
}

func serviceBackendCommand() *cobra.Command {
	c := &cobra.Command{Use: "backend", Short: "Add or remove a pool's backends"}
	add := &cobra.Command{
		Use:   "add SERVICE POOL BACKEND",
		Short: "Add a backend: HOST/GUEST[:PORT][@WEIGHT] (encap) or ADDR[:PORT][@WEIGHT] (nat)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := parseBackend(args[2])
			if err != nil {
				return fmt.Errorf("backend %q: %w", args[2], err)
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, err := cl.AddBackend(cmd.Context(), args[0], args[1], b)
			if err != nil {
				return err
			}
			return writeService(cmd, args[0], res)
		},
	}
	remove := &cobra.Command{
		Use:     "remove SERVICE POOL KEY",
		Aliases: []string{"rm"},
		Short:   "Remove a backend by its key (host/guest[:port] or address[:port]); drain it first to spare its connections",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, err := cl.RemoveBackend(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return writeService(cmd, args[0], res)
		},
	}
	c.AddCommand(add, remove)
	return c
}

func serviceDrainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "drain SERVICE POOL KEY",
		Short: "Drain a backend (weight 0): it keeps its connections and gets no new ones",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setWeight(cmd, args[0], args[1], args[2], 0)
		},
	}
}

func serviceWeightCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "weight SERVICE POOL KEY N",
		Short: fmt.Sprintf("Set a backend's weight (0-%d; 0 drains it)", model.MaxWeight),
		Args:  cobra.ExactArgs(4),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseUint(args[3], 10, 32)
			if err != nil {
				return fmt.Errorf("weight %q is not a number", args[3])
			}
			return setWeight(cmd, args[0], args[1], args[2], uint32(n))
		},
	}
}

func setWeight(cmd *cobra.Command, svc, pool, key string, w uint32) error {
	cl, err := apiClient()
	if err != nil {
		return err
	}
	res, err := cl.SetBackendWeight(cmd.Context(), svc, pool, key, w)
	if err != nil {
		return err
	}
	if globals.json {
		return writeService(cmd, svc, res)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "service %s %s: pool %s backend %s weight %d (revision %d)\n", svc, res.Action, pool, key, w, res.Revision)
	return err
}

// writeService reports a change with the service as now stored.
func writeService(cmd *cobra.Command, name string, res client.Result) error {
	var v model.Service
	if err := json.Unmarshal(res.Object, &v); err != nil {
		return fmt.Errorf("service %s: decoding the stored service: %w", name, err)
	}
	return writeResult(cmd, "service "+name, res, &v)
}

func describeService(w io.Writer, o model.Object) {
	v := o.(*model.Service)
	tw := newTable(w)
	row(tw, "name:", v.Name)
	row(tw, "vip:", v.VIP)
	row(tw, "mode:", v.Mode)
	row(tw, "table size:", v.TableSize)
	row(tw, "description:", v.Description)
	if v.Limits != nil {
		row(tw, "rate limits:", limitsText(v.Limits))
	}
	tw.Flush()
	fmt.Fprintln(w, "listeners:")
	tw = newTable(w, "  LISTENER", "POOL")
	for _, l := range v.Listeners {
		row(tw, "  "+l.String(), l.Pool)
	}
	tw.Flush()
	fmt.Fprintln(w, "pools:")
	tw = newTable(w, "  POOL", "BACKEND", "WEIGHT")
	for _, p := range v.Pools {
		for _, b := range p.Backends {
			row(tw, "  "+p.Name, b.Key(), b.W())
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "health checks:")
	tw = newTable(w, "  POOL", "CHECK")
	for _, p := range v.Pools {
		row(tw, "  "+p.Name, describeCheck(p.Health))
	}
	tw.Flush()
}

// describeCheck writes a check in the --health syntax.
func describeCheck(h *model.HealthCheck) string {
	if h == nil {
		return "none"
	}
	s := h.Type
	switch {
	case h.Path != "":
		s += ":" + h.Path
	case h.Send != "":
		s += ":" + h.Send
	case h.Command != "":
		s += ":" + string(h.Command)
	}
	if h.Port != 0 {
		s += fmt.Sprintf(",port=%d", h.Port)
	}
	if h.Status != 0 && h.Status != model.DefaultHealthStatus {
		s += fmt.Sprintf(",status=%d", h.Status)
	}
	return s + fmt.Sprintf(",interval=%v,timeout=%v,rise=%d,fall=%d", time.Duration(h.Interval), time.Duration(h.Timeout), h.Rise, h.Fall)
}

func serviceTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "VIP", "MODE", "LISTENERS", "BACKENDS")
	for _, o := range objs {
		v := o.(*model.Service)
		var ls []string
		for _, l := range v.Listeners {
			ls = append(ls, l.String()+"="+l.Pool)
		}
		n := 0
		for _, p := range v.Pools {
			n += len(p.Backends)
		}
		row(tw, v.Name, v.VIP, v.Mode, strings.Join(ls, ","), n)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no services)")
	}
}

func serviceStatusCommand() *cobra.Command {
	var seed uint32
	c := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a service's backend health and every edge's table per pool",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := apiClient()
			if err != nil {
				return err
			}
			st, err := cl.ServiceStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if globals.json {
				return printJSON(cmd.OutOrStdout(), st)
			}
			p, err := servicePlan(cmd.Context(), cl, st.Service, st.Health, seed)
			if err != nil {
				return err
			}
			printServiceStatus(cmd.OutOrStdout(), st, p, time.Now())
			return nil
		},
	}
	c.Flags().Uint32Var(&seed, "hash-seed", flowhash.DefaultHashSeed, "the cluster's flow hash seed (the edges' --hash-seed), for the expected table checksums")
	return c
}

// servicePlan computes what every edge programs, with the function the
// edges use (lbplan.Build): every service (the ones before this one in
// name order may leave it out for capacity), the hosts that place encap
// backends, this service's health verdicts and the seed.
func servicePlan(ctx context.Context, cl *client.Client, v *model.Service, h *model.Health, seed uint32) (*lbplan.Plan, error) {
	svcs, err := cl.Services(ctx)
	if err != nil {
		return nil, err
	}
	hosts, err := cl.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	return planOf(svcs, hosts, v, h, seed), nil
}

// planOf builds the plan of the services with v as given and h its
// health.
func planOf(svcs []model.Service, hosts []model.Host, v *model.Service, h *model.Health, seed uint32) *lbplan.Plan {
	in := lbplan.Input{Services: map[string]*model.Service{}, Health: map[string]*model.Health{v.Name: h}, Hosts: lbplan.NewHosts(hosts), Seed: seed}
	for i := range svcs {
		in.Services[svcs[i].Name] = &svcs[i]
	}
	in.Services[v.Name] = v
	return lbplan.Build(in)
}

// serviceProblems are the plan's problems that concern service name.
func serviceProblems(p *lbplan.Plan, name string) []string {
	return p.Problems.Of(name).Strings()
}

func printServiceStatus(w io.Writer, st *client.ServiceStatus, plan *lbplan.Plan, now time.Time) {
	v := st.Service
	fmt.Fprintf(w, "service %s: VIP %v, %s, revision %d, %d backend(s) down\n\n", v.Name, v.VIP, v.Mode, st.Revision, st.Health.DownCount())
	tw := newTable(w, "POOL", "BACKEND", "WEIGHT", "HEALTH", "REPORTS", "DETAIL")
	for _, p := range st.Pools {
		for _, b := range p.Backends {
			state := "up"
			switch {
			case b.Down:
				state = "down"
			case b.Weight == 0:
				state = "drained"
			}
			reports := "none"
			if b.UpVotes+b.DownVotes > 0 {
				reports = fmt.Sprintf("%d down, %d up", b.DownVotes, b.UpVotes)
			}
			detail := ""
			for _, r := range b.Reports {
				if !r.Up {
					detail = r.Edge + ": " + r.Detail
					break
				}
			}
			row(tw, p.Name, b.Key, b.Weight, state, reports, detail)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = newTable(w, "POOL", "EDGE", "CHECKSUM", "M", "BACKENDS", "HEALTHY", "REVISION", "UPDATED", "AGREE")
	notes := serviceProblems(plan, v.Name)
	for _, p := range st.Pools {
		want := ""
		if pl := plan.Pool(v.Name + "/" + p.Name); pl != nil {
			want = fmt.Sprintf("%016x", pl.Checksum)
		}
		for _, t := range p.Tables {
			if t.Missing != "" {
				row(tw, p.Name, t.Edge, "-", "-", "-", "-", revision(t.AppliedRevision), ago(now, t.Updated), "no ("+t.Missing+")")
				continue
			}
			agree := "yes"
			if t.Checksum != want {
				agree = "no"
			}
			row(tw, p.Name, t.Edge, t.Checksum, t.M, t.Backends, t.Healthy, revision(t.AppliedRevision), ago(now, t.Updated), agree)
		}
		if len(p.Tables) == 0 {
			row(tw, p.Name, "(no edge)", "-", "-", "-", "-", "-", "-", "no")
		}
		notes = append(notes, fmt.Sprintf("pool %s: expected checksum %s (seed %#x); edges agree with each other: %s", p.Name, orDash(want), plan.Seed, yesNo(p.Agree)))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	for _, e := range st.Errors {
		fmt.Fprintln(w, "error:", e)
	}
}

func revision(r int64) string {
	if r == 0 {
		return "-"
	}
	return strconv.FormatInt(r, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// lookupResult is what `service lookup --json` prints.
type lookupResult struct {
	Flow     string `json:"flow"`
	Listener string `json:"listener"`
	Pool     string `json:"pool"`
	Seed     uint32 `json:"seed"`
	Hash     uint32 `json:"hash"`
	M        uint64 `json:"m"`
	Slot     uint64 `json:"slot"`
	Backend  string `json:"backend"`
	Weight   uint32 `json:"weight"`
	Target   string `json:"target"` // where the packet goes (nat: address:port; encap: host/guest and port)
	// FirstChoice is the slot's backend before failures were applied,
	// when it differs (it is down).
	FirstChoice string `json:"first_choice,omitempty"`
}

func serviceLookupCommand() *cobra.Command {
	var (
		flow string
		seed uint32
	)
	c := &cobra.Command{
		Use:   "lookup NAME --flow PROTO:SRC:SPORT-DST:DPORT",
		Short: "Say which backend a new flow reaches (computed like the edges: Maglev table, health, flow hash)",
		Example: `  azgate service lookup web --flow tcp:203.0.113.10:40000-198.51.100.20:80
  azgate service lookup dns --flow udp:203.0.113.7:5353-198.51.100.20:53 --hash-seed 0x12345678`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tuple, proto, err := parseFlow(flow)
			if err != nil {
				return err
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			v, err := cl.GetService(ctx, args[0])
			if err != nil {
				return err
			}
			h, err := cl.GetHealth(ctx, args[0])
			if err != nil {
				return err
			}
			plan, err := servicePlan(ctx, cl, v, h, seed)
			if err != nil {
				return err
			}
			res, err := lookup(plan, v, tuple, proto)
			if err != nil {
				return err
			}
			if globals.json {
				return printJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			tw := newTable(w)
			row(tw, "flow:", res.Flow)
			row(tw, "listener:", res.Listener+" -> pool "+res.Pool)
			row(tw, "hash:", fmt.Sprintf("0x%08x (seed %#x)", res.Hash, res.Seed))
			row(tw, "slot:", fmt.Sprintf("%d of %d", res.Slot, res.M))
			b := fmt.Sprintf("%s (weight %d)", res.Backend, res.Weight)
			if res.FirstChoice != "" {
				b += fmt.Sprintf(", because %s, the slot's first choice, is down", res.FirstChoice)
			}
			row(tw, "backend:", b)
			row(tw, "target:", res.Target)
			tw.Flush()
			fmt.Fprintln(w, "(a new flow; an established one stays on the backend in the edge's connection table)")
			return nil
		},
	}
	c.Flags().StringVar(&flow, "flow", "", "the flow: PROTO:SRC:SPORT-DST:DPORT, e.g. tcp:203.0.113.10:40000-198.51.100.20:80")
	c.Flags().Uint32Var(&seed, "hash-seed", flowhash.DefaultHashSeed, "the cluster's flow hash seed (the edges' --hash-seed); also seeds the Maglev permutations")
	c.MarkFlagRequired("flow")
	return c
}

// parseFlow parses PROTO:SRC:SPORT-DST:DPORT: IPv4, or IPv6 in brackets
// ([2001:db8::1]:80; an IPv6 VIP's flow), both of one family.
func parseFlow(s string) (flowhash.Tuple, string, error) {
	bad := func(why string) (flowhash.Tuple, string, error) {
		return flowhash.Tuple{}, "", fmt.Errorf("--flow %q: %s (want PROTO:SRC:SPORT-DST:DPORT, e.g. tcp:203.0.113.10:40000-198.51.100.20:80)", s, why)
	}
	proto, rest, ok := strings.Cut(s, ":")
	proto = strings.ToLower(proto)
	if !ok {
		return bad("no addresses")
	}
	var num uint8
	switch proto {
	case model.ProtoTCP:
		num = 6
	case model.ProtoUDP:
		num = 17
	default:
		return bad(fmt.Sprintf("protocol %q is not tcp or udp", proto))
	}
	src, dst, ok := strings.Cut(rest, "-")
	if !ok {
		return bad("no '-' between source and destination")
	}
	plain := func(a netip.Addr) bool { return a.Is4() || (a.Is6() && !a.Is4In6() && a.Zone() == "") }
	sa, err := netip.ParseAddrPort(src)
	if err != nil || !plain(sa.Addr()) {
		return bad(fmt.Sprintf("source %q is not IPv4:PORT or [IPv6]:PORT", src))
	}
	da, err := netip.ParseAddrPort(dst)
	if err != nil || !plain(da.Addr()) {
		return bad(fmt.Sprintf("destination %q is not IPv4:PORT or [IPv6]:PORT", dst))
	}
	if sa.Addr().Is4() != da.Addr().Is4() {
		return bad("the source and the destination are of different families")
	}
	return flowhash.Tuple{Src: sa.Addr(), Dst: da.Addr(), SrcPort: sa.Port(), DstPort: da.Port(), Proto: num}, proto, nil
}

// lookup says where a new flow to service v goes, from the plan every
// edge programs (lbplan.Plan.Lookup: the listener for its protocol and
// port, its pool's Maglev table with the down backends failed, the slot
// of the flow hash; the same seed serves the table and the hash).
func lookup(plan *lbplan.Plan, v *model.Service, t flowhash.Tuple, proto string) (*lookupResult, error) {
	if t.Dst != v.VIP {
		return nil, fmt.Errorf("the flow goes to %v, not to service %s's VIP %v", t.Dst, v.Name, v.VIP)
	}
	if _, ok := plan.Services[v.Name]; !ok {
		return nil, fmt.Errorf("service %s is not programmed on the edges: %s", v.Name, strings.Join(serviceProblems(plan, v.Name), "; "))
	}
	c, err := plan.Lookup(t)
	if errors.Is(err, lbplan.ErrNoListener) {
		return nil, fmt.Errorf("service %s has no listener for %s port %d: the edge passes such packets to its kernel", v.Name, proto, t.DstPort)
	}
	if c == nil {
		return nil, fmt.Errorf("service %s: %w", v.Name, err)
	}
	if c.Pool.Service != v.Name {
		return nil, fmt.Errorf("the flow reaches service %s, which shares the VIP, not %s", c.Pool.Service, v.Name)
	}
	if err != nil {
		return nil, err
	}
	res := &lookupResult{
		Flow:     fmt.Sprintf("%s %v:%d -> %v:%d", proto, t.Src, t.SrcPort, t.Dst, t.DstPort),
		Listener: c.Listener.String(), Pool: c.Pool.Name, Seed: plan.Seed, Hash: c.Hash, M: c.Pool.M, Slot: c.Slot,
		Backend: c.Backend.Spec.Key(), Weight: c.Backend.Weight, FirstChoice: c.FirstChoice,
	}
	be := c.Backend.Spec
	port := be.Port
	if port == 0 {
		port = t.DstPort
	}
	if v.Mode == model.ModeNAT {
		res.Target = netip.AddrPortFrom(be.Address, port).String()
	} else {
		res.Target = fmt.Sprintf("guest %s/%s port %d (NVGRE to its host)", be.Host, be.Guest, port)
	}
	return res, nil
}
