package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// labContextFile is where `lab up` tells the CLI how to reach the lab.
const labContextFile = "/run/azgate/context.json"

func init() {
	register(func() *cobra.Command {
		cfg := lab.Config{}
		c := &cobra.Command{
			Use:   "lab",
			Short: "A whole region on this machine, in network namespaces",
			Long: `The lab builds an Internet client, an upstream router running BIRD 2 (one
BGP session per edge, ECMP), six edges (a prefix set of two POPs x two
edges, a dedicated and a quarantine set's edge), an underlay router, three
AZs of two hosts with two guests each and three DMZ servers, all in network
namespaces joined by veth pairs, and runs the controller (embedded etcd, or
with "lab up --etcd-members 3" a cluster of etcd-server processes),
the edges and the agents in them. It is sealed from the machine's network.

Every role runs the azgate binary (--azgate PATH; default: azgate in this
binary's directory, as make build puts bin/azgate beside bin/azgate-lab).`,
		}
		// The roles run the shipped azgate (--azgate); the lab's servers
		// run this binary (lab serve).
		c.PersistentPreRun = func(*cobra.Command, []string) { cfg.Binary = globals.azgate }
		c.PersistentFlags().StringVar(&cfg.Prefix, "prefix", lab.DefaultPrefix, "prefix of the lab's namespaces and pins")
		c.PersistentFlags().StringVar(&cfg.StateDir, "state-dir", lab.DefaultStateDir, "controller data, logs and lab state")
		ctxFile := func() string {
			if cfg.Prefix == lab.DefaultPrefix {
				return labContextFile
			}
			return ""
		}
		up := &cobra.Command{
			Use:   "up",
			Short: "Build the lab and start every role",
			Long: `Builds the lab and starts every role. With --etcd-members N the store is a
cluster of N real etcd-server processes (Debian's etcd) on unix sockets in
STATE_DIR/etcd (mode 0700) instead of the controller's embedded etcd; the
controller, the edges and the agents get --etcd-endpoints with every member,
and lab down stops the members by PID.

With --etcd-proxies N (needs --etcd-members) N etcd gRPC proxies
("etcd grpc-proxy start") stand in front of the members: the edges and the
agents point at one proxy each, round-robin (lab status lists which), and the
controller, the bandwidth managers and the GSLB stay on the members. A proxy
listens on TCP only, so each runs in a network namespace of its own on
127.0.0.1:23790 and is reached through a unix socket in STATE_DIR/etcd
(mode 0700: root only), like the members (docs/scale.md, "Watch fan-out
through the proxy").

With --underlay ipv6 every host's underlay is IPv6 (2001:db8:18:NN::2, no IPv4
address there): the edges keep their IPv4 underlay address (BGP, the
connection sync) and add an IPv6 one (their underlay6, 2001:db8:18:1KK::2),
and every tunnel to a host runs over IPv6. With --underlay mixed only the
hosts of even AZs are on IPv6. IPv6 underlay links have an MTU of 1,520, so
the guests' packets fit the 20 bytes longer outer header.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg.Out = cmd.OutOrStdout()
				cfg.ContextFile = ctxFile()
				ctx, cancel := signalContext()
				defer cancel()
				_, err := lab.Up(ctx, cfg)
				return err
			},
		}
		etcdMembersFlag := func(c *cobra.Command) {
			c.Flags().IntVar(&cfg.EtcdMembers, "etcd-members", 0, "run the store on this many etcd-server processes (3 for a cluster that survives one member's loss; 0: the controller's embedded etcd)")
			c.Flags().StringVar(&cfg.Underlay, "underlay", lab.UnderlayIPv4, "the underlay's family: ipv4; ipv6 (every host's tunnels over IPv6, the edges dual-stack on the underlay); mixed (the hosts of even AZs on IPv6, the others on IPv4)")
			c.Flags().IntVar(&cfg.EtcdProxies, "etcd-proxies", 0, "with --etcd-members: run this many etcd gRPC proxies (0-16) and point the edges and agents at them, round-robin")
		}
		etcdMembersFlag(up)
		c.AddCommand(up)
		c.AddCommand(&cobra.Command{
			Use:   "down",
			Short: "Remove every namespace, link, pinned program and process of the lab",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg.ContextFile = ctxFile()
				if err := lab.Down(cfg); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "lab is down")
				return nil
			},
		})
		c.AddCommand(&cobra.Command{
			Use:   "status",
			Short: "List every lab node: namespace, role, AZ, addresses, process",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				l, err := lab.Open(cfg)
				if err != nil {
					return err
				}
				ctx, cancel := signalContext()
				defer cancel()
				v := l.Status(ctx)
				if globals.json {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(v)
				}
				printLabStatus(cmd, v)
				return nil
			},
		})
		demo := &cobra.Command{
			Use:   "demo",
			Short: "Bind an EIP, drift it to AZ 3 under traffic, services; then ECMP over the edge set, pull-out, quarantine, an edge killed under traffic",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg.Out = cmd.OutOrStdout()
				cfg.ContextFile = ctxFile()
				if err := cfg.CheckBinaries(); err != nil { // the demo restarts roles
					return err
				}
				ctx, cancel := signalContext()
				defer cancel()
				l, err := lab.Open(cfg)
				if err != nil {
					if l, err = lab.Up(ctx, cfg); err != nil {
						return err
					}
				}
				return l.Demo(ctx)
			},
		}
		etcdMembersFlag(demo)
		c.AddCommand(demo)
		c.AddCommand(&cobra.Command{
			Use:   "exec NODE -- CMD [ARGS...]",
			Short: "Run a command inside a lab node (e.g. lab exec inet -- curl http://198.51.100.7/)",
			Args:  cobra.MinimumNArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				l, err := lab.Open(cfg)
				if err != nil {
					return err
				}
				x := l.Exec(args[0], args[1:])
				if x == nil {
					return fmt.Errorf("no lab node %q (see azgate-lab lab status)", args[0])
				}
				err = x.Run()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					os.Exit(ee.ExitCode())
				}
				return err
			},
		})
		var name, echoAddr string
		var httpAddrs []string
		serve := &cobra.Command{
			Use:    "serve",
			Short:  "The lab's servers: HTTP answering with their name, and a line echo",
			Hidden: true,
			Args:   cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				return lab.Serve(ctx, name, httpAddrs, echoAddr)
			},
		}
		serve.Flags().StringVar(&name, "name", "guest", "name to answer with")
		serve.Flags().StringSliceVar(&httpAddrs, "http", []string{"0.0.0.0:80", "0.0.0.0:443"}, "HTTP addresses")
		serve.Flags().StringVar(&echoAddr, "echo", "0.0.0.0:7000", "line echo address (empty: none)")
		c.AddCommand(serve)
		var bridgeSock, bridgeAddr string
		var bridgePID int
		bridge := &cobra.Command{
			Use:    lab.BridgeCommandName,
			Short:  "An etcd proxy's bridge: its unix socket to its port in its network namespace",
			Hidden: true,
			Args:   cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				return etcdproc.ServeBridge(ctx, bridgeSock, bridgePID, bridgeAddr)
			},
		}
		bridge.Flags().StringVar(&bridgeSock, "socket", "", "unix socket to listen on")
		bridge.Flags().IntVar(&bridgePID, "netns-pid", 0, "the proxy's PID (its network namespace)")
		bridge.Flags().StringVar(&bridgeAddr, "addr", etcdproc.ProxyAddr, "TCP address in that namespace")
		c.AddCommand(bridge)
		c.AddCommand(labGSLBCommand(&cfg))
		c.AddCommand(labPrometheusCommands(&cfg)...)
		return c
	})
}

func printLabStatus(cmd *cobra.Command, v lab.View) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
	ctl := "stopped"
	if v.Controller {
		ctl = "running"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "controller %s, API %s, token %s\n", ctl, v.API, v.TokenFile)
	if sock, ok := strings.CutPrefix(v.API, "unix://"); ok {
		// The status page (docs/observability.md): a browser reaches no
		// unix socket, curl does, with the token as a Basic password.
		fmt.Fprintf(cmd.OutOrStdout(), "status page: curl -su lab:\"$(cat %s)\" --unix-socket %s http://lab/ui > status.html\n", v.TokenFile, sock)
	}
	for _, m := range v.Etcd {
		st := "stopped"
		if m.Running {
			st = fmt.Sprintf("running (pid %d)", m.PID)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "etcd member %s %s, %s\n", m.Name, st, m.Endpoint)
	}
	for _, p := range v.EtcdProxies {
		st := "stopped"
		if p.Running {
			st = fmt.Sprintf("running (pid %d, bridge pid %d)", p.PID, p.BridgePID)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "etcd proxy %s %s, %s, for %s\n", p.Name, st, p.Endpoint, strings.Join(p.Nodes, " "))
	}
	if bw := v.Bandwidth; bw != nil {
		for _, s := range bw.Servers {
			st := "stopped"
			if s.Running {
				st = fmt.Sprintf("running (pid %d)", s.PID)
			}
			where := "the machine's namespace"
			if s.Netns != "" {
				where = "netns " + s.Netns
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bandwidth store %s %s, %s, %s\n", s.Zone, st, s.URL(), where)
		}
		for _, m := range bw.Managers {
			st := "stopped"
			if m.Running {
				st = fmt.Sprintf("running (pid %d)", m.PID)
			}
			if m.Active {
				st += ", active"
			}
			scope := m.Scope
			if m.Zone != "" {
				scope += " " + m.Zone
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bandwidth manager %s (%s) %s\n", m.Name, scope, st)
		}
	}
	// rtr's routes to the prefix set's prefixes, IPv4 and IPv6 (learnt
	// over the same BGP sessions), one next hop per live edge.
	if v.RoutesErr != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "rtr routes: %s\n", v.RoutesErr)
	}
	for _, line := range lab.RouteLines(v.Routes) {
		fmt.Fprintf(cmd.OutOrStdout(), "rtr route %s\n", line)
	}
	// The EIPs, IPv4 then IPv6 (the guests are dual-stack).
	if v.EIPsErr != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "eips: %s\n", v.EIPsErr)
	}
	for _, line := range lab.EIPLines(v.EIPs, lab.MaxEIPLines) {
		fmt.Fprintf(cmd.OutOrStdout(), "eip %s\n", line)
	}
	fmt.Fprintln(cmd.OutOrStdout())
	fmt.Fprintln(w, "NODE\tNAMESPACE\tROLE\tAZ\tADDRESSES\tPROCESS\tSTATUS")
	for _, n := range v.Nodes {
		var addrs []string
		for dev, a := range n.Addresses {
			addrs = append(addrs, dev+"="+a)
		}
		sort.Strings(addrs)
		var addrs6 []string // after the IPv4 ones
		for dev, a := range n.Addresses6 {
			addrs6 = append(addrs6, dev+"="+a)
		}
		sort.Strings(addrs6)
		addrs = append(addrs, addrs6...)
		proc := "-"
		if n.Process != nil {
			proc = "stopped"
			if n.Running {
				proc = fmt.Sprintf("running (pid %d)", n.Process.PID)
			}
		}
		st := "-"
		if n.Status != nil {
			st = fmt.Sprintf("rev %d, %d routes, updated %s ago", n.Status.AppliedRevision, n.Status.Routes,
				time.Since(n.Status.Updated).Round(time.Second))
			if len(n.Status.Errors) > 0 {
				st += ", errors: " + strings.Join(n.Status.Errors, "; ")
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Netns, n.Role, n.AZ, strings.Join(addrs, " "), proc, st)
	}
	w.Flush()
}

// labGSLBCommand is `azgate-lab lab gslb`: the three-region GSLB and
// path-computation lab (docs/lab.md, "The GSLB lab"), apart from the
// region lab (its own namespaces, prefix azgg-, and state directory).
func labGSLBCommand(cfg *lab.Config) *cobra.Command {
	c := &cobra.Command{
		Use:   "gslb",
		Short: "Three regions of pathd behind BIRD and announcers, a GSLB DNS per region, probers",
		Long: `The GSLB lab: three regions (eu, us, ap), each with a router running BIRD
(ECMP over the servers that announce the region's pathd VIP), three pathd
servers each running the announcer and a Redis replica, the region's Redis
primary, a gslb instance (one vantage point; authoritative for example.)
and a prober that reports to pathd.example; a core router and two origins.
The regions are dual-stack: each has an IPv4 and an IPv6 VIP (both
announced by the same announcers, the IPv6 one over MP-BGP), the record
answers A and AAAA per region, the gslb instances listen on both families.
Its namespaces start with azgg- and its state is in /run/azgate-gslblab
unless --prefix and --state-dir say otherwise.`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Build the GSLB lab and start every process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = cmd.OutOrStdout()
			ctx, cancel := signalContext()
			defer cancel()
			_, err := lab.UpGSLB(ctx, *cfg)
			return err
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "down",
		Short: "Remove every namespace and process of the GSLB lab",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.DownGSLB(*cfg); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "GSLB lab is down")
			return nil
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "demo",
		Short: "Probers at home; a server dies (route withdrawn); a region dies (DNS moves its prober); no report lost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = cmd.OutOrStdout()
			if err := cfg.CheckBinaries(); err != nil { // the demo restarts roles
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			g, err := lab.OpenGSLB(*cfg)
			if err != nil {
				if g, err = lab.UpGSLB(ctx, *cfg); err != nil {
					return err
				}
			}
			_, err = g.DemoGSLB(ctx)
			return err
		},
	})
	return c
}
