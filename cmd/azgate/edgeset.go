//go:build !node

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
		var role string
		var sb model.SetBGP
		create := &cobra.Command{
			Use:   "create NAME [--role dedicated|quarantine] [--prefix P ...] --edge name=edge-a1,underlay=198.18.0.1 [--edge ...] [--asn N]",
			Short: "Create an edge set (a prefix set by default; dedicated and quarantine sets announce /32s)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				s := &model.EdgeSet{Name: args[0], Role: role, Prefixes: []netip.Prefix{}, Edges: []model.EdgeNode{}}
				if sb.ASN != 0 || sb.HoldTime != 0 || sb.Keepalive != 0 {
					b := sb
					s.BGP = &b
				}
				for _, p := range prefixes {
					pp, err := netip.ParsePrefix(p)
					if err != nil {
						return fmt.Errorf("--prefix %q is not a prefix (want ADDR/BITS)", p)
					}
					s.Prefixes = append(s.Prefixes, pp)
				}
				for _, e := range edges {
					kv, err := keyValues("edge", e, "name", "underlay", "underlay6")
					if err != nil {
						return err
					}
					n := model.EdgeNode{Name: kv["name"]}
					if n.Underlay, err = parseAddr(fmt.Sprintf("--edge %q: underlay", e), kv["underlay"]); err != nil {
						return err
					}
					if u6, ok := kv["underlay6"]; ok {
						if n.Underlay6, err = parseAddr(fmt.Sprintf("--edge %q: underlay6", e), u6); err != nil {
							return err
						}
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
		create.Flags().StringArrayVar(&prefixes, "prefix", nil, "a prefix the set announces (repeatable; prefix sets only)")
		create.Flags().StringArrayVar(&edges, "edge", nil, "an edge: name=NAME,underlay=ADDR[,underlay6=ADDR6] (repeatable; underlay6, its IPv6 underlay address, is required of every edge once a host's underlay is IPv6)")
		create.Flags().StringVar(&role, "role", "", "dedicated (takes pulled-out EIPs and VIPs) or quarantine (the region's one quarantine set); empty: a prefix set")
		bgpFlags(create, &sb)
		c.AddCommand(create, setBGPCommand(), edgeBGPCommand())
		c.AddCommand(objectCommands(model.KindEdgeSet, describeEdgeSet, edgeSetTable)...)
		return c
	})
}

func describeEdgeSet(w io.Writer, o model.Object) {
	s := o.(*model.EdgeSet)
	tw := newTable(w)
	row(tw, "name:", s.Name)
	row(tw, "role:", roleName(s.Role))
	row(tw, "prefixes:", joinPrefixes(s.Prefixes))
	if s.BGP != nil {
		hold, ka := s.BGP.Timers()
		row(tw, "bgp:", fmt.Sprintf("AS %d, hold %d s, keepalive %d s", s.BGP.ASN, hold, ka))
	}
	tw.Flush()
	if len(s.Edges) == 0 {
		fmt.Fprintln(w, "edges: none")
		return
	}
	fmt.Fprintln(w, "edges:")
	tw = newTable(w, "  NAME", "UNDERLAY", "STATE", "ROUTER-ID", "NEXT-HOP", "PEERS")
	for _, e := range s.Edges {
		state := "in service"
		if e.Drained {
			state = "drained"
		}
		var rid, nh, peers string
		if e.BGP != nil {
			rid, nh = e.BGP.RouterID.String(), e.BGP.NextHop.String()
			if e.BGP.NextHop6.IsValid() {
				nh += "," + e.BGP.NextHop6.String()
			}
			var ps []string
			for _, p := range e.BGP.Peers {
				md5 := ""
				if p.Password != "" {
					md5 = "+md5"
				}
				ps = append(ps, fmt.Sprintf("%v/AS%d%s", p.Address, p.ASN, md5))
			}
			peers = strings.Join(ps, ",")
		}
		ul := e.Underlay.String()
		if e.Underlay6.IsValid() {
			ul += "," + e.Underlay6.String()
		}
		row(tw, "  "+e.Name, ul, state, rid, nh, peers)
	}
	tw.Flush()
}

func edgeSetTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "ROLE", "PREFIXES", "EDGES")
	for _, o := range objs {
		s := o.(*model.EdgeSet)
		names := make([]string, len(s.Edges))
		for i, e := range s.Edges {
			names[i] = e.Name
			if e.Drained {
				names[i] += "(drained)"
			}
		}
		row(tw, s.Name, roleName(s.Role), joinPrefixes(s.Prefixes), strings.Join(names, ","))
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
