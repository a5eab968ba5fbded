//go:build !node

package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/api"
)

// azgate ddos: the controller's DDoS detection (docs/ddos.md).
func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "ddos", Short: "DDoS detection: its decisions (automatic quarantines and releases) and the rates it sees"}
		var since uint64
		events := &cobra.Command{
			Use:   "events [--since SEQ]",
			Short: "List the detection's decisions, oldest first, with the figures that triggered them",
			Long: `Lists the decisions the acting controller's DDoS detection made (a bounded
history kept in memory; a controller that does not act has none): quarantine,
release, or skip (a decision the store refused). Each names the rates summed
over the edges and the levels they were compared with.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				ev, err := cl.DDoSEvents(cmd.Context(), since)
				if err != nil {
					return err
				}
				if globals.json {
					return printJSON(cmd.OutOrStdout(), ev)
				}
				eventsTable(cmd.OutOrStdout(), ev)
				return nil
			},
		}
		events.Flags().Uint64Var(&since, "since", 0, "only events after this sequence number")
		var top int
		rates := &cobra.Command{
			Use:   "rates [--top N]",
			Short: "Show the per-EIP rates the edges report (above their floor), summed over the edges",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				r, err := cl.DDoSRates(cmd.Context(), top)
				if err != nil {
					return err
				}
				if globals.json {
					return printJSON(cmd.OutOrStdout(), r)
				}
				w := cmd.OutOrStdout()
				tw := newTable(w, "ADDRESS", "PPS", "BPS", "SYN/S", "EDGES")
				for _, x := range r.Rates {
					row(tw, x.Address, num(x.PPS), num(x.BPS), num(x.SYNPS), x.Edges)
				}
				tw.Flush()
				if len(r.Rates) == 0 {
					fmt.Fprintf(w, "(no EIP above the edges' reporting floor; %d edge(s) reporting)\n", r.Edges)
				}
				return nil
			},
		}
		rates.Flags().IntVar(&top, "top", 20, "at most this many addresses, the highest packet rates (1..10000)")
		c.AddCommand(events, rates, ddosPolicyCommand())
		return c
	})
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func eventsTable(w io.Writer, ev *api.DDoSEvents) {
	switch {
	case !ev.Enabled:
		fmt.Fprintln(w, "DDoS detection is off on this controller (--ddos=false)")
	case !ev.Acting:
		fmt.Fprintf(w, "this controller (%s) does not act for DDoS detection: another one does\n", ev.Holder)
	}
	tw := newTable(w, "SEQ", "TIME", "ACTION", "ADDRESS", "PPS", "BPS", "SYN/S", "EDGES", "REASON")
	for _, e := range ev.Events {
		row(tw, e.Seq, e.Time.Local().Format(time.DateTime+".000"), e.Action, e.Address, num(e.PPS), num(e.BPS), num(e.SYNPS), e.Edges, e.Reason)
	}
	tw.Flush()
	if len(ev.Events) == 0 {
		fmt.Fprintln(w, "(no decisions)")
	}
	for _, b := range ev.BadReports {
		fmt.Fprintln(w, "unreadable rate report:", b)
	}
}
