//go:build !node

package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/secretfile"
)

func roleName(r string) string {
	if r == model.RolePrefix {
		return "prefix"
	}
	return r
}

func bgpFlags(c *cobra.Command, b *model.SetBGP) {
	c.Flags().Uint32Var(&b.ASN, "asn", 0, "the edges' local AS number")
	c.Flags().Uint16Var(&b.HoldTime, "hold-time", 0, "BGP hold time in seconds (0: 90)")
	c.Flags().Uint16Var(&b.Keepalive, "keepalive", 0, "BGP keepalive in seconds (0: a third of the hold time)")
}

// editSet reads a set, lets edit change it and writes it back unless
// someone changed it meanwhile (client.Edit: edit runs again on the new
// version).
func editSet(ctx context.Context, name string, edit func(*model.EdgeSet) error) (client.Result, *model.EdgeSet, error) {
	cl, err := apiClient()
	if err != nil {
		return client.Result{}, nil, err
	}
	res, o, err := cl.Edit(ctx, model.KindEdgeSet, name, func(o model.Object) error { return edit(o.(*model.EdgeSet)) })
	if err != nil {
		return client.Result{}, nil, err
	}
	return res, o.(*model.EdgeSet), nil
}

// setBGPCommand: azgate set bgp SET --asn N [--hold-time S] [--keepalive S].
func setBGPCommand() *cobra.Command {
	var b model.SetBGP
	c := &cobra.Command{
		Use:   "bgp SET --asn N [--hold-time S] [--keepalive S]",
		Short: "Set the BGP AS number and timers every edge of a set shares",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, s, err := editSet(cmd.Context(), args[0], func(s *model.EdgeSet) error {
				nb := b
				s.BGP = &nb
				return nil
			})
			if err != nil {
				return err
			}
			return writeResult(cmd, "edge set "+s.Name, res, s)
		},
	}
	bgpFlags(c, &b)
	c.MarkFlagRequired("asn")
	return c
}

// edgeBGPCommand: azgate set edge-bgp SET EDGE --router-id A --next-hop A [--next-hop6 A6] --peer address=A,asn=N[,port=P][,password-file=F].
func edgeBGPCommand() *cobra.Command {
	var routerID, nextHop, nextHop6 string
	var peers []string
	var clear bool
	c := &cobra.Command{
		Use:   "edge-bgp SET EDGE --router-id ADDR --next-hop ADDR [--next-hop6 ADDR6] --peer address=ADDR,asn=N[,port=P][,password-file=FILE] [--peer ...]",
		Short: "Configure one edge's BGP speaker (its router ID, the next hop it announces, its peers)",
		Long: "The MD5 password of a session is read from a file (password-file=FILE) so it never " +
			"appears in a command line; it is stored with the set. --next-hop6, the edge's global IPv6 " +
			"address on the routers' segment, makes the sessions carry IPv6 unicast too (MP-BGP) and is " +
			"required when the set owns IPv6 prefixes. --clear removes the edge's BGP.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var nb *model.NodeBGP
			if !clear {
				nb = &model.NodeBGP{}
				var err error
				if nb.RouterID, err = parseAddr("--router-id", routerID); err != nil {
					return err
				}
				if nb.NextHop, err = parseAddr("--next-hop", nextHop); err != nil {
					return err
				}
				if nextHop6 != "" {
					if nb.NextHop6, err = parseAddr("--next-hop6", nextHop6); err != nil {
						return err
					}
				}
				for _, p := range peers {
					kv, err := keyValues("peer", p, "address", "asn", "port", "password-file")
					if err != nil {
						return err
					}
					var bp model.BGPPeer
					if bp.Address, err = parseAddr(fmt.Sprintf("--peer %q: address", p), kv["address"]); err != nil {
						return err
					}
					asn, err := strconv.ParseUint(kv["asn"], 10, 32)
					if err != nil {
						return fmt.Errorf("--peer %q: asn %q is not a number", p, kv["asn"])
					}
					bp.ASN = uint32(asn)
					if v, ok := kv["port"]; ok {
						port, err := strconv.ParseUint(v, 10, 16)
						if err != nil || port == 0 {
							return fmt.Errorf("--peer %q: port %q is not a port", p, v)
						}
						bp.Port = uint16(port)
					}
					if f, ok := kv["password-file"]; ok {
						if bp.Password, err = secretfile.Read(f, "password file"); err != nil {
							return fmt.Errorf("--peer %q: %w", p, err)
						}
					}
					nb.Peers = append(nb.Peers, bp)
				}
			}
			res, s, err := editSet(cmd.Context(), args[0], func(s *model.EdgeSet) error {
				for i := range s.Edges {
					if s.Edges[i].Name == args[1] {
						s.Edges[i].BGP = nb
						return nil
					}
				}
				return fmt.Errorf("edge set %s has no edge %q", s.Name, args[1])
			})
			if err != nil {
				return err
			}
			return writeResult(cmd, "edge set "+s.Name, res, s)
		},
	}
	c.Flags().StringVar(&routerID, "router-id", "", "the speaker's router ID")
	c.Flags().StringVar(&nextHop, "next-hop", "", "the next hop announced: the edge's Internet-side address")
	c.Flags().StringVar(&nextHop6, "next-hop6", "", "the IPv6 next hop of the set's IPv6 routes (the edge's global IPv6 address on the routers' segment; enables IPv6 unicast on its sessions)")
	c.Flags().StringArrayVar(&peers, "peer", nil, "a peer: address=ADDR,asn=N[,port=P][,password-file=FILE] (repeatable)")
	c.Flags().BoolVar(&clear, "clear", false, "remove the edge's BGP configuration")
	return c
}
