package model

import (
	"net/url"
	"strings"
	"time"
)

// HealthRoot is the etcd prefix under which edges publish their health
// check results, one key per edge, service, pool and backend:
//
//	/azgate/health/EDGE/SERVICE/POOL/BACKENDKEY
//
// EDGE, SERVICE and POOL are names (no '/'); BACKENDKEY is Backend.Key()
// escaped with url.PathEscape, so "az1-h1/g1:8080" is written
// "az1-h1%2Fg1:8080". The value is a HealthReport in JSON. Each edge
// writes its keys with a lease of its own (DefaultHealthReportTTL, kept
// alive while the edge runs), so the reports of an edge that is gone
// vanish and stop counting. The controller watches the prefix and stores
// the majority's verdict as the service's Health object.
const HealthRoot = "/azgate/health/"

// DefaultHealthReportTTL is the lease TTL edges give their reports: an
// edge gone for this long no longer counts in the majority.
const DefaultHealthReportTTL = 10 * time.Second

// HealthReport is one edge's current verdict on one backend:
//
//	{"up": false, "since": "2026-12-02T15:04:05Z", "detail": "connect: connection refused"}
type HealthReport struct {
	// Up is the check's state after rise/fall (not the last probe).
	Up bool `json:"up"`
	// Since is when the state last changed on this edge (RFC 3339).
	Since time.Time `json:"since"`
	// Detail says why, for people: the last error or answer.
	Detail string `json:"detail,omitempty"`
}

// HealthReportKey is the etcd key of an edge's report on a backend (the
// backend key is escaped; see HealthRoot).
func HealthReportKey(edge, service, pool, backendKey string) string {
	return HealthRoot + edge + "/" + service + "/" + pool + "/" + url.PathEscape(backendKey)
}

// HealthReportEdgePrefix is the prefix of every report of one edge (with
// its trailing '/').
func HealthReportEdgePrefix(edge string) string { return HealthRoot + edge + "/" }

// ParseHealthReportKey splits a report key into its parts, the backend key
// unescaped. ok is false for anything not of the form HealthReportKey
// writes.
func ParseHealthReportKey(k string) (edge, service, pool, backend string, ok bool) {
	rest, found := strings.CutPrefix(k, HealthRoot)
	if !found {
		return "", "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return "", "", "", "", false
	}
	for _, p := range parts {
		if p == "" {
			return "", "", "", "", false
		}
	}
	b, err := url.PathUnescape(parts[3])
	if err != nil || b == "" {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], b, true
}
