package model

import (
	"fmt"
	"slices"
)

// RedactedSecret stands for a secret (an edge's BGP MD5 password) in
// what the API answers and azgate export writes: secrets are write-only.
// A write that carries it for a secret keeps the stored one (KeepSecrets),
// so an exported document applies again as it is.
const RedactedSecret = "(redacted)"

// Redacted returns o with its secrets replaced by RedactedSecret: o itself
// when it has none, else a copy (o is not changed).
func Redacted(o Object) Object {
	s, ok := o.(*EdgeSet)
	if !ok || !hasSecrets(s) {
		return o
	}
	c := *s
	c.Edges = slices.Clone(s.Edges)
	for i := range c.Edges {
		e := &c.Edges[i]
		if e.BGP == nil {
			continue
		}
		b := *e.BGP
		b.Peers = slices.Clone(b.Peers)
		for j := range b.Peers {
			if b.Peers[j].Password != "" {
				b.Peers[j].Password = RedactedSecret
			}
		}
		e.BGP = &b
	}
	return &c
}

func hasSecrets(s *EdgeSet) bool {
	for _, e := range s.Edges {
		if e.BGP == nil {
			continue
		}
		for _, p := range e.BGP.Peers {
			if p.Password != "" {
				return true
			}
		}
	}
	return false
}

// KeepSecrets replaces each RedactedSecret in o by the secret stored for
// the same place in old (the stored version of o, nil if none): an edge's
// peer password by the password of the peer of the same address of the
// edge of the same name. A RedactedSecret with no stored secret there is
// an error naming the field. o is changed in place; an object without
// RedactedSecret is left as it is.
func KeepSecrets(o, old Object) error {
	s, ok := o.(*EdgeSet)
	if !ok {
		return nil
	}
	prev, _ := old.(*EdgeSet)
	var es Errors
	for i := range s.Edges {
		e := &s.Edges[i]
		if e.BGP == nil {
			continue
		}
		for j := range e.BGP.Peers {
			p := &e.BGP.Peers[j]
			if p.Password != RedactedSecret {
				continue
			}
			if pw := storedPassword(prev, e.Name, p); pw != "" {
				p.Password = pw
				continue
			}
			es.add(fmt.Sprintf("edges[%d].bgp.peers[%d].password", i, j),
				"%q keeps the stored password, but edge %q has no stored password for peer %s: give the password", RedactedSecret, e.Name, p.Address)
		}
	}
	if len(es) > 0 {
		return es
	}
	return nil
}

func storedPassword(prev *EdgeSet, edge string, p *BGPPeer) string {
	if prev == nil {
		return ""
	}
	for _, e := range prev.Edges {
		if e.Name != edge || e.BGP == nil {
			continue
		}
		for _, q := range e.BGP.Peers {
			if q.Address == p.Address {
				return q.Password
			}
		}
	}
	return ""
}
