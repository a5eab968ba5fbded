package controller

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// Narrow edits: one change to part of an object made by the controller on
// the current version, so two operators changing different parts never
// need to read-modify-write (nor retry after a 412). They take If-Match
// like PUT (etag.go).

// modifyObject replaces the object of kind at the path key with a changed
// copy (clone must copy whatever change modifies); change may refuse with
// an error. It answers the write with the object's ETag.
func modifyObject[P model.Object](s *Server, w http.ResponseWriter, r *http.Request, kind string, clone func(P) P, change func(st *model.State, o P) error) error {
	key := r.PathValue("key")
	m, err := parseIfMatch(r)
	if err != nil {
		return err
	}
	var (
		action string
		stored P
		orev   int64
	)
	rev, err := s.write(r.Context(), func(t *txn) (err error) {
		if err := t.require(kind, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(kind, key)
		o, ok := t.st.Get(kind, key)
		if !ok {
			return &model.NotFoundError{Kind: kind, Key: key}
		}
		cp := clone(o.(P)) // never change the stored object
		if err := change(t.st, cp); err != nil {
			return err
		}
		stored = cp
		action, err = t.put(cp)
		return invalid(kind, key, err)
	})
	if err != nil {
		return err
	}
	s.logChange(kind, key, action, rev)
	if action != api.Unchanged {
		orev = rev
	}
	setETag(w, orev)
	writeJSON(w, http.StatusOK, rev, writeBody{rev, action, stored})
	return nil
}

func cloneEIP(e *model.EIP) *model.EIP { cp := *e; return &cp }

func clonePackage(p *model.BandwidthPackage) *model.BandwidthPackage {
	cp := *p
	cp.EIPs = slices.Clone(p.EIPs)
	return &cp
}

// setEIPLimits: POST /v1/eips/{key}/limits with the limits.
func (s *Server) setEIPLimits(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `JSON limits {"sourcePps": N, "sourceBurst": N, "synRate": N, "synBurst": N}`)
	if err != nil {
		return err
	}
	var l model.Limits
	if err := model.UnmarshalStrict(body, &l); err != nil {
		return decodeError("limits in the request body", err)
	}
	return modifyObject(s, w, r, model.KindEIP, cloneEIP, func(_ *model.State, e *model.EIP) error {
		e.Limits = &l
		return nil
	})
}

// clearEIPLimits: DELETE /v1/eips/{key}/limits.
func (s *Server) clearEIPLimits(w http.ResponseWriter, r *http.Request) error {
	return modifyObject(s, w, r, model.KindEIP, cloneEIP, func(_ *model.State, e *model.EIP) error {
		e.Limits = nil
		return nil
	})
}

// addPackageEIP: POST /v1/bandwidthpackages/{key}/eips with a member.
func (s *Server) addPackageEIP(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON package EIP {"address": "...", "min": N, "max": N, "weight": N}`)
	if err != nil {
		return err
	}
	var pe model.PackageEIP
	if err := model.UnmarshalStrict(body, &pe); err != nil {
		return decodeError("package EIP in the request body", err)
	}
	return modifyObject(s, w, r, model.KindBandwidthPackage, clonePackage, func(_ *model.State, p *model.BandwidthPackage) error {
		if slices.ContainsFunc(p.EIPs, func(e model.PackageEIP) bool { return e.Address == pe.Address }) {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("bandwidth package %q already has EIP %v", p.Name, pe.Address)}
		}
		p.EIPs = append(p.EIPs, pe)
		return nil
	})
}

// removePackageEIP: DELETE /v1/bandwidthpackages/{key}/eips/{address}.
func (s *Server) removePackageEIP(w http.ResponseWriter, r *http.Request) error {
	addr, err := netip.ParseAddr(r.PathValue("address"))
	if err != nil {
		return badRequest("EIP address %q in the path: %v", r.PathValue("address"), err)
	}
	return modifyObject(s, w, r, model.KindBandwidthPackage, clonePackage, func(_ *model.State, p *model.BandwidthPackage) error {
		n := len(p.EIPs)
		p.EIPs = slices.DeleteFunc(p.EIPs, func(e model.PackageEIP) bool { return e.Address == addr })
		if len(p.EIPs) == n {
			return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("bandwidth package %q has no EIP %v", p.Name, addr)}
		}
		return nil
	})
}

func cloneZone(z *model.DNSZone) *model.DNSZone {
	cp := *z
	cp.Records = slices.Clone(z.Records)
	return &cp
}

func cloneGSLBRecord(r *model.GSLBRecord) *model.GSLBRecord {
	cp := *r
	cp.Targets = slices.Clone(r.Targets)
	return &cp
}

// addZoneRecord: POST /v1/dnszones/{key}/records with a static record.
func (s *Server) addZoneRecord(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON record {"name": "...", "type": "...", "value": "...", "ttl": N}`)
	if err != nil {
		return err
	}
	var rec model.ZoneRecord
	if err := model.UnmarshalStrict(body, &rec); err != nil {
		return decodeError("record in the request body", err)
	}
	return modifyObject(s, w, r, model.KindDNSZone, cloneZone, func(_ *model.State, z *model.DNSZone) error {
		if slices.ContainsFunc(z.Records, func(o model.ZoneRecord) bool {
			return o.Name == rec.Name && o.Type == rec.Type && o.Value == rec.Value
		}) {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("DNS zone %q already has the record %s %s %s", z.Name, rec.Name, rec.Type, rec.Value)}
		}
		z.Records = append(z.Records, rec)
		return nil
	})
}

// addGSLBTarget: POST /v1/gslbrecords/{key}/targets with a target.
func (s *Server) addGSLBTarget(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON target {"vip": "...", "region": "...", "weight": N, "order": N, "lat": F, "lon": F}`)
	if err != nil {
		return err
	}
	var tg model.GSLBTarget
	if err := model.UnmarshalStrict(body, &tg); err != nil {
		return decodeError("target in the request body", err)
	}
	return modifyObject(s, w, r, model.KindGSLBRecord, cloneGSLBRecord, func(_ *model.State, g *model.GSLBRecord) error {
		if slices.ContainsFunc(g.Targets, func(o model.GSLBTarget) bool { return o.VIP == tg.VIP }) {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("GSLB record %q already has a target %v", g.Name, tg.VIP)}
		}
		g.Targets = append(g.Targets, tg)
		return nil
	})
}

// removeGSLBTarget: DELETE /v1/gslbrecords/{key}/targets/{vip}.
func (s *Server) removeGSLBTarget(w http.ResponseWriter, r *http.Request) error {
	vip, err := netip.ParseAddr(r.PathValue("vip"))
	if err != nil {
		return badRequest("target VIP %q in the path: %v", r.PathValue("vip"), err)
	}
	return modifyObject(s, w, r, model.KindGSLBRecord, cloneGSLBRecord, func(_ *model.State, g *model.GSLBRecord) error {
		n := len(g.Targets)
		g.Targets = slices.DeleteFunc(g.Targets, func(o model.GSLBTarget) bool { return o.VIP == vip })
		if len(g.Targets) == n {
			return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("GSLB record %q has no target %v", g.Name, vip)}
		}
		return nil
	})
}
