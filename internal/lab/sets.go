package lab

import (
	"github.com/azgate/azgate/internal/model"
)

// EdgeSets are the lab region's edge sets: the prefix set over both POPs,
// the dedicated set and the quarantine set, each edge with one eBGP
// session to the upstream router (the edges dial; BIRD only listens). The
// prefix set owns an IPv4 and an IPv6 prefix (SetPrefixes); every edge
// has a nextHop6, its Internet-side IPv6 address, so its session carries
// IPv6 unicast too (MP-BGP) and a dedicated or quarantine set could
// announce an IPv6 address's /128.
func EdgeSets() []model.EdgeSet {
	asn := map[string]uint32{PrefixSet: prefixSetASN, DedicatedSet: dedicatedASN, QuarantineSet: quarASN}
	role := map[string]string{PrefixSet: model.RolePrefix, DedicatedSet: model.RoleDedicated, QuarantineSet: model.RoleQuarantine}
	var out []model.EdgeSet
	for _, name := range []string{PrefixSet, DedicatedSet, QuarantineSet} {
		s := model.EdgeSet{Name: name, Role: role[name], BGP: &model.SetBGP{ASN: asn[name], HoldTime: HoldTime, Keepalive: Keepalive}}
		if name == PrefixSet {
			s.Prefixes = SetPrefixes()
		}
		for k, e := range Edges {
			if e.Set != name {
				continue
			}
			peer := model.BGPPeer{Address: rtrSide(k), ASN: RouterASN}
			if e.MD5 {
				peer.Password = MD5Password
			}
			s.Edges = append(s.Edges, model.EdgeNode{Name: e.Name, Underlay: edgeUnderlay(k),
				BGP: &model.NodeBGP{RouterID: edgeUnderlay(k), NextHop: edgeExt(k), NextHop6: edgeExt6(k), Peers: []model.BGPPeer{peer}}})
		}
		out = append(out, s)
	}
	return out
}
