package controller

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/azgate/azgate/internal/model"
)

// The HTTP side of the narrow edits (Core.modify and rules.go): one change
// to part of an object made by the controller on the current version, so
// two operators changing different parts never need to read-modify-write
// (nor retry after a 412). They take If-Match like PUT (etag.go).

// setEIPLimits: POST /v1/eips/{key}/limits with the limits.
func (s *Server) setEIPLimits(w http.ResponseWriter, r *http.Request) error {
	var l model.Limits
	if err := s.decodeBody(w, r, `JSON limits {"sourcePps": N, "sourceBurst": N, "synRate": N, "synBurst": N}`, "limits", &l); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.SetEIPLimits(ctx, key, m, l)
	})
}

// clearEIPLimits: DELETE /v1/eips/{key}/limits.
func (s *Server) clearEIPLimits(w http.ResponseWriter, r *http.Request) error {
	return s.edit(w, r, s.Core.ClearEIPLimits)
}

// addPackageEIP: POST /v1/bandwidthpackages/{key}/eips with a member.
func (s *Server) addPackageEIP(w http.ResponseWriter, r *http.Request) error {
	var pe model.PackageEIP
	if err := s.decodeBody(w, r, `a JSON package EIP {"address": "...", "min": N, "max": N, "weight": N}`, "package EIP", &pe); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.AddPackageEIP(ctx, key, m, pe)
	})
}

// removePackageEIP: DELETE /v1/bandwidthpackages/{key}/eips/{address}.
func (s *Server) removePackageEIP(w http.ResponseWriter, r *http.Request) error {
	addr, err := netip.ParseAddr(r.PathValue("address"))
	if err != nil {
		return badRequest("EIP address %q in the path: %v", r.PathValue("address"), err)
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.RemovePackageEIP(ctx, key, m, addr)
	})
}

// addZoneRecord: POST /v1/dnszones/{key}/records with a static record.
func (s *Server) addZoneRecord(w http.ResponseWriter, r *http.Request) error {
	var rec model.ZoneRecord
	if err := s.decodeBody(w, r, `a JSON record {"name": "...", "type": "...", "value": "...", "ttl": N}`, "record", &rec); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.AddZoneRecord(ctx, key, m, rec)
	})
}

// addGSLBTarget: POST /v1/gslbrecords/{key}/targets with a target.
func (s *Server) addGSLBTarget(w http.ResponseWriter, r *http.Request) error {
	var tg model.GSLBTarget
	if err := s.decodeBody(w, r, `a JSON target {"vip": "...", "region": "...", "weight": N, "order": N, "lat": F, "lon": F}`, "target", &tg); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.AddGSLBTarget(ctx, key, m, tg)
	})
}

// removeGSLBTarget: DELETE /v1/gslbrecords/{key}/targets/{vip}.
func (s *Server) removeGSLBTarget(w http.ResponseWriter, r *http.Request) error {
	vip, err := netip.ParseAddr(r.PathValue("vip"))
	if err != nil {
		return badRequest("target VIP %q in the path: %v", r.PathValue("vip"), err)
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.RemoveGSLBTarget(ctx, key, m, vip)
	})
}
