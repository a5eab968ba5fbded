//go:build !node

package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// globals are the flags every CLI noun shares.
var globals struct {
	api       string
	tokenFile string
	json      bool
	force     bool
	dryRun    bool
}

func addGlobalFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&globals.api, "api", "", "controller API URL: http://HOST:PORT or unix:///path (default: $AZGATE_API, the lab's context, or http://127.0.0.1:7080)")
	f.StringVar(&globals.tokenFile, "token-file", "", "file holding the API bearer token (default: $AZGATE_TOKEN_FILE, the lab's context, or /var/lib/azgate/token)")
	f.BoolVar(&globals.json, "json", false, "print JSON instead of tables")
	f.BoolVar(&globals.force, "force", false, "do a change the controller refuses as one taking a whole kind, the region or a last unit out of service (it says what the change would do)")
	f.BoolVar(&globals.dryRun, "dry-run", false, "check a change on the controller against the current state and write nothing")
}

// apiClient is a client of the controller chosen by the global flags.
func apiClient() (*client.Client, error) {
	url, token, from, err := client.ResolveFrom(globals.api, globals.tokenFile)
	if err != nil {
		return nil, err
	}
	c := client.New(url, token)
	c.TokenFrom = from
	c.Force, c.DryRun = globals.force, globals.dryRun
	return c, nil
}

// printWarnings prints the controller's warnings about a change on
// stderr.
func printWarnings(cmd *cobra.Command, ws []string) {
	for _, w := range ws {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
}

// printRefusals prints the guard refusals a dry run would hit: the write
// itself needs --force.
func printRefusals(w io.Writer, rs []string) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "refused without --force (the write would fail with these; nothing was written):\n")
	for _, r := range rs {
		fmt.Fprintf(w, "  ! %s\n", r)
	}
}

// newTable starts an aligned table; call Flush when done.
func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(header) > 0 {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		s := fmt.Sprint(c)
		if s == "" {
			s = "-"
		}
		fmt.Fprint(tw, s)
	}
	fmt.Fprintln(tw)
}

// writeResult reports a write: the stored object's JSON with --json,
// else one line.
func writeResult(cmd *cobra.Command, what string, res client.Result, obj any) error {
	if globals.json {
		if err := printJSON(cmd.OutOrStdout(), struct {
			Revision int64    `json:"revision"`
			Action   string   `json:"action"`
			Object   any      `json:"object,omitempty"`
			Warnings []string `json:"warnings,omitempty"`
			DryRun   bool     `json:"dryRun,omitempty"`
			Refusals []string `json:"refusals,omitempty"`
		}{res.Revision, res.Action, obj, res.Warnings, res.DryRun, res.Refusals}); err != nil {
			return err
		}
		return dryRunOutcome(res.Refusals)
	}
	printWarnings(cmd, res.Warnings)
	if res.DryRun {
		if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s would be %s (dry run at revision %d: nothing was written)\n", what, res.Action, res.Revision); err != nil {
			return err
		}
		printRefusals(cmd.OutOrStdout(), res.Refusals)
		return dryRunOutcome(res.Refusals)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (revision %d)\n", what, res.Action, res.Revision)
	return err
}

// objectCommands adds get, list and delete for a kind.
func objectCommands(kind string, describe func(io.Writer, model.Object), table func(io.Writer, []model.Object)) []*cobra.Command {
	name := model.Singular(kind)
	key := "NAME"
	if kind == model.KindEIP || kind == model.KindQuarantine {
		key = "ADDRESS"
	}
	return []*cobra.Command{
		{
			Use:   "get " + key,
			Short: "Show one " + name,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := apiClient()
				if err != nil {
					return err
				}
				o, err := c.Get(cmd.Context(), kind, args[0])
				if err != nil {
					return err
				}
				if globals.json {
					return printJSON(cmd.OutOrStdout(), o)
				}
				describe(cmd.OutOrStdout(), o)
				return nil
			},
		},
		listCommand(kind, table),
		{
			Use:     "delete " + key,
			Aliases: []string{"rm"},
			Short:   "Delete a " + name + " (refused while other objects refer to it)",
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := apiClient()
				if err != nil {
					return err
				}
				res, err := c.Delete(cmd.Context(), kind, args[0])
				if err != nil {
					return err
				}
				return writeResult(cmd, name+" "+args[0], res, nil)
			},
		},
	}
}

// listCommand lists the objects of a kind, a page at a time with
// --limit/--continue; EIPs are filtered by --set, --host and --prefix
// (on the controller).
func listCommand(kind string, table func(io.Writer, []model.Object)) *cobra.Command {
	var q client.ListQuery
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List every " + model.Singular(kind),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			var objs []model.Object
			var next string
			if q.Limit == 0 {
				objs, err = c.ListAll(cmd.Context(), kind, q) // every page
			} else {
				objs, next, err = c.ListPage(cmd.Context(), kind, q)
			}
			if err != nil {
				return err
			}
			if objs == nil {
				objs = []model.Object{}
			}
			if globals.json {
				if q.Limit == 0 {
					return printJSON(cmd.OutOrStdout(), objs)
				}
				return printJSON(cmd.OutOrStdout(), struct {
					Items    []model.Object `json:"items"`
					Continue string         `json:"continue,omitempty"`
				}{objs, next})
			}
			table(cmd.OutOrStdout(), objs)
			if next != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "(more: --continue %s)\n", next)
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&q.Limit, "limit", 0, "at most this many (0: all); with --json the answer is {items, continue}")
	f.StringVar(&q.Continue, "continue", "", "list from after this key (the one a --limit page ends with)")
	if kind == model.KindEIP {
		f.StringVar(&q.Set, "set", "", "only the EIPs this edge set serves")
		f.StringVar(&q.Host, "host", "", "only the EIPs bound to guests of this host")
		f.StringVar(&q.Prefix, "prefix", "", "only the EIPs inside this prefix")
	}
	return c
}

// keyValues parses a flag value of the form "k1=v1,k2=v2" with the keys
// allowed; every error names the flag and the value.
func keyValues(flag, value string, allowed ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--%s %q: %q is not KEY=VALUE (keys: %s)", flag, value, part, strings.Join(allowed, ", "))
		}
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("--%s %q: unknown key %q (keys: %s)", flag, value, k, strings.Join(allowed, ", "))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--%s %q: %s given twice", flag, value, k)
		}
		out[k] = v
	}
	return out, nil
}

// parseAddr parses an address named by what in errors.
func parseAddr(what, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			if _, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
				return a, fmt.Errorf("%s %q is not an IP address: write an IPv6 address without brackets (%s)", what, s, s[1:len(s)-1])
			}
		}
		return a, fmt.Errorf("%s %q is not an IP address", what, s)
	}
	return a, nil
}
