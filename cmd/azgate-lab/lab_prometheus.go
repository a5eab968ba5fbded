package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/packaging"
)

// labPrometheusCommands are lab prometheus up|down|status, lab dashboard
// and the hidden lab metrics-proxy (docs/lab.md, "Metrics and the
// dashboard").
func labPrometheusCommands(cfg *lab.Config) []*cobra.Command {
	var pc lab.PrometheusConfig
	prom := &cobra.Command{
		Use:   "prometheus",
		Short: "The lab's Prometheus (Debian's prometheus) scraping every role, with azgate's alert rules",
		Long: `lab prometheus up starts Debian's prometheus for the running lab: a scrape
every 5 s of every role's /metrics (the controller, each edge, agent and
bandwidth manager; the node label is the dashboard's node variable), the
alert rules of packaging/prometheus/azgate-rules.yml loaded, storage in
STATE_DIR/prometheus/data, listening on 127.0.0.1 only (--listen). The
roles serve /metrics on their own namespace's loopback; Prometheus reaches
them through the lab's metrics proxy (--proxy-listen, 127.0.0.1 too), which
knows only the lab's targets and opens each connection inside the target's
namespace. lab prometheus down stops both by PID (lab down does too).`,
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Start the lab's Prometheus and its metrics proxy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := lab.Open(*cfg)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			st, err := l.PrometheusUp(ctx, pc)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "prometheus is up: %s (pid %d; metrics proxy %s, pid %d; %d targets; storage %s/data)\n",
				st.URL(), st.PID, st.ProxyListen, st.ProxyPID, len(l.MetricsTargets()), st.Dir)
			return nil
		},
	}
	up.Flags().StringVar(&pc.Listen, "listen", lab.DefaultPrometheusListen, "Prometheus' address (loopback only)")
	up.Flags().StringVar(&pc.ProxyListen, "proxy-listen", lab.DefaultMetricsProxyListen, "the metrics proxy's address (loopback only)")
	up.Flags().StringVar(&pc.Binary, "prometheus", "prometheus", "the prometheus binary")
	prom.AddCommand(up)
	prom.AddCommand(&cobra.Command{
		Use:   "down",
		Short: "Stop the lab's Prometheus and its metrics proxy (by PID)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.PrometheusDown(*cfg); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "prometheus is down")
			return nil
		},
	})
	prom.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Where the lab's Prometheus listens",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.PrometheusStatus(*cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (pid %d; metrics proxy %s, pid %d)\n", st.URL(), st.PID, st.ProxyListen, st.ProxyPID)
			return nil
		},
	})

	var out, dashFile, promURL string
	var window time.Duration
	var vars []string
	dash := &cobra.Command{
		Use:   "dashboard -o FILE.html",
		Short: "Render the Grafana dashboard's JSON from the lab's Prometheus as a static HTML page",
		Long: `Renders packaging/grafana/azgate.json (built in; --dashboard FILE for another)
from the lab's Prometheus: its template variables substituted (--var
node=edge-a1; default: each variable's "All"), each panel's queries run over
the last --window (query_range), and one HTML page written with an SVG chart
per timeseries panel and the numbers of each stat panel, titled as in the
JSON. It is a renderer of the same JSON for the lab, not Grafana: Grafana is
not in Debian and the lab fetches no binaries.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("-o FILE.html is required")
			}
			b := packaging.Dashboard
			if dashFile != "" {
				var err error
				if b, err = os.ReadFile(dashFile); err != nil {
					return err
				}
			}
			d, err := lab.ParseDashboard(b)
			if err != nil {
				return err
			}
			if promURL == "" {
				st, err := lab.PrometheusStatus(*cfg)
				if err != nil {
					return err
				}
				promURL = st.URL()
			}
			o := lab.DashboardOptions{Prometheus: promURL, Window: window, Vars: map[string]string{}}
			for _, v := range vars {
				k, val, ok := strings.Cut(v, "=")
				if !ok || k == "" {
					return fmt.Errorf("--var %q: want NAME=VALUE", v)
				}
				o.Vars[k] = val
			}
			ctx, cancel := signalContext()
			defer cancel()
			data, err := lab.QueryDashboard(ctx, d, o)
			if err != nil {
				return err
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := lab.RenderDashboard(f, data); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			n, errs := 0, 0
			for _, p := range data.Panels {
				if len(p.Series) > 0 {
					n++
				}
				errs += len(p.Errors)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d panels, %d with data, %d query errors\n", out, len(data.Panels), n, errs)
			return nil
		},
	}
	dash.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	dash.Flags().StringVar(&dashFile, "dashboard", "", "a Grafana dashboard JSON (default: the built-in packaging/grafana/azgate.json)")
	dash.Flags().StringVar(&promURL, "prometheus-url", "", "Prometheus' base URL (default: the lab's, from lab prometheus up)")
	dash.Flags().DurationVar(&window, "window", 10*time.Minute, "the time range: the last this long")
	dash.Flags().StringArrayVar(&vars, "var", nil, "a template variable's value, NAME=VALUE (a regular expression for a multi-value one)")

	var listen string
	proxy := &cobra.Command{
		Use:    "metrics-proxy",
		Short:  "The HTTP proxy the lab's Prometheus scrapes the roles' /metrics through",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := lab.Open(*cfg)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return l.ServeMetricsProxy(ctx, listen)
		},
	}
	proxy.Flags().StringVar(&listen, "listen", lab.DefaultMetricsProxyListen, "address (loopback only)")
	return []*cobra.Command{prom, dash, proxy}
}
