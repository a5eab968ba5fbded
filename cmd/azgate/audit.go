//go:build !node

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// azgate audit: the controller's audit log (docs/security.md).
func init() {
	register(func() *cobra.Command {
		var limit int
		var cont string
		c := &cobra.Command{
			Use:   "audit [--limit N] [--continue C]",
			Short: "List the changes made through the API, newest first: who, what, when, revision (admin token)",
			Long: `Lists the audit log: each change made through the API with the name and role
of its token, the request, the objects it put or deleted and the revision it
was committed at. The controller keeps the newest records (--audit-keep,
10000 by default) in etcd, each written in the same transaction as its
change. Reading it needs an admin token. --continue takes the value the
previous page printed last.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				p, err := cl.Audit(cmd.Context(), limit, cont)
				if err != nil {
					return err
				}
				if globals.json {
					return printJSON(cmd.OutOrStdout(), p)
				}
				w := cmd.OutOrStdout()
				tw := newTable(w, "REVISION", "TIME", "WHO", "ROLE", "REQUEST", "OBJECTS")
				for _, a := range p.Items {
					objs := make([]string, 0, len(a.Objects))
					for _, o := range a.Objects {
						objs = append(objs, o.Action+" "+o.Kind+"/"+o.Key)
					}
					s := strings.Join(objs, ", ")
					if a.Omitted > 0 {
						s += fmt.Sprintf(" and %d more", a.Omitted)
					}
					row(tw, a.Revision, a.Time.Local().Format(time.DateTime), a.Who, a.Role, a.Method+" "+a.Path, s)
				}
				tw.Flush()
				if p.Continue != "" {
					fmt.Fprintf(w, "(more: --continue %s)\n", p.Continue)
				}
				return nil
			},
		}
		c.Flags().IntVar(&limit, "limit", 0, "at most this many records (1..1000; default 100)")
		c.Flags().StringVar(&cont, "continue", "", "continue after the previous page")
		return c
	})
}
