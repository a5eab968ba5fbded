package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "set", Aliases: []string{"edgeset"}, Short: "Edge sets: edges that announce the same prefixes (ECMP)"}
		var prefixes, edges []string
		create := &cobra.Command{
			Use:   "create NAME --prefix P [--prefix P ...] --edge name=edge-a1,underlay=198.18.0.1 [--edge ...]",
			Short: "Create an edge set",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				s := &model.EdgeSet{Name: args[0], Prefixes: []netip.Prefix{}, Edges: []model.EdgeNode{}}
				for _, p := range prefixes {
					pp, err := netip.ParsePrefix(p)
					if err != nil {
						return fmt.Errorf("--prefix %q is not a prefix (want ADDR/BITS)", p)
					}
					s.Prefixes = append(s.Prefixes, pp)
				}
				for _, e := range edges {
					kv, err := keyValues("edge", e, "name", "underlay")
					if err != nil {
						return err
					}
					n := model.EdgeNode{Name: kv["name"]}
					if n.Underlay, err = parseAddr(fmt.Sprintf("--edge %q: underlay", e), kv["underlay"]); err != nil {
						return err
					}
					s.Edges = append(s.Edges, n)
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.Create(cmd.Context(), s)
				if err != nil {
					return err
				}
				return writeResult(cmd, "edge set "+s.Name, res, s)
			},
		}
		create.Flags().StringArrayVar(&prefixes, "prefix", nil, "a prefix the set announces (repeatable)")
		create.Flags().StringArrayVar(&edges, "edge", nil, "an edge: name=NAME,underlay=ADDR (repeatable)")
		create.MarkFlagRequired("prefix")
		c.AddCommand(create)
		c.AddCommand(objectCommands(model.KindEdgeSet, describeEdgeSet, edgeSetTable)...)
		return c
	})
}

func describeEdgeSet(w io.Writer, o model.Object) {
	s := o.(*model.EdgeSet)
	tw := newTable(w)
	row(tw, "name:", s.Name)
	row(tw, "prefixes:", joinPrefixes(s.Prefixes))
	tw.Flush()
	if len(s.Edges) == 0 {
		fmt.Fprintln(w, "edges: none")
		return
	}
	fmt.Fprintln(w, "edges:")
	tw = newTable(w, "  NAME", "UNDERLAY")
	for _, e := range s.Edges {
		row(tw, "  "+e.Name, e.Underlay)
	}
	tw.Flush()
}

func edgeSetTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "PREFIXES", "EDGES")
	for _, o := range objs {
		s := o.(*model.EdgeSet)
		names := make([]string, len(s.Edges))
		for i, e := range s.Edges {
			names[i] = e.Name
		}
		row(tw, s.Name, joinPrefixes(s.Prefixes), strings.Join(names, ","))
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no edge sets)")
	}
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
