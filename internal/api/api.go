// Package api holds the wire types of the controller's REST API (under
// /v1) that are not model objects: list and write envelopes, apply results,
// status and errors. The controller encodes them and the client decodes
// them, so both sides share one definition.
package api

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// RevisionHeader carries the store revision a response reflects: the
// revision after a write, or the revision of the controller's view for a read.
const RevisionHeader = "Azgate-Revision"

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
	// Fields are the field errors, at most 100; Omitted counts the rest.
	Fields  []model.FieldError `json:"fields,omitempty"`
	Omitted int                `json:"omitted,omitempty"`
	// Revision is, in a 412 (If-Match failed), the object's current
	// revision, as its ETag header gives it too (0: it does not exist).
	Revision int64 `json:"revision,omitempty"`
	// Force, in a 409, says the change was refused as one that takes a
	// whole kind, the region or a last unit out of service (the message
	// says what it would do): the same request with force=true does it.
	Force bool `json:"force,omitempty"`
}

// List is the body of GET /v1/KIND: the objects ordered by key.
type List struct {
	Revision int64           `json:"revision"`
	Items    json.RawMessage `json:"items"`
	// Continue, with ?limit=N, is the key to send as ?continue= for
	// the next page (absent: the last page).
	Continue string `json:"continue,omitempty"`
}

// Write is the body answering a create, replace, bind, unbind or guest
// change: the revision after it and the object as stored. Object is absent
// after a delete.
type Write struct {
	Revision int64           `json:"revision"`
	Action   string          `json:"action"` // created, updated, unchanged, deleted
	Object   json.RawMessage `json:"object,omitempty"`
	// Warnings: what the controller found questionable but wrote
	// (duplicate firewall rules, DNS data not fully qualified).
	Warnings []string `json:"warnings,omitempty"`
	// DryRun: nothing was written (dryRun=true); Action is what the
	// write would have done at Revision.
	DryRun bool `json:"dryRun,omitempty"`
	// Refusals (a dry run only): what the guards refuse without
	// force=true; the write itself would get 409 with them.
	Refusals []string `json:"refusals,omitempty"`
}

// Actions reported by writes and apply.
const (
	Created   = "created"
	Updated   = "updated"
	Unchanged = "unchanged"
	Deleted   = "deleted"
)

// Bind is the body of POST /v1/eips/{addr}/bind.
type Bind struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}

// AppliedObject is one object of an applied document, or one deleted
// by prune=true.
type AppliedObject struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Action string `json:"action"`
	// Changes are the fields an update changes (with diff=true).
	Changes []FieldChange `json:"changes,omitempty"`
}

// FieldChange is one changed field of an updated object: its path
// ("pools[0].backends[1].weight") and its JSON values before and after
// (absent: the field was or becomes unset).
type FieldChange struct {
	Field string          `json:"field"`
	Old   json.RawMessage `json:"old,omitempty"`
	New   json.RawMessage `json:"new,omitempty"`
}

// ApplyResult is the body answering POST /v1/apply.
type ApplyResult struct {
	Revision  int64           `json:"revision"`
	Created   int             `json:"created"`
	Updated   int             `json:"updated"`
	Unchanged int             `json:"unchanged"`
	Deleted   int             `json:"deleted,omitempty"`
	Objects   []AppliedObject `json:"objects"`
	// Warnings: what the controller found questionable but applied.
	Warnings []string `json:"warnings,omitempty"`
	// DryRun: nothing was written (dryRun=true); the result is what the
	// apply would have done at Revision.
	DryRun bool `json:"dryRun,omitempty"`
	// Refusals (a dry run only): what the guards refuse without
	// force=true; the apply itself would get 409 with them.
	Refusals []string `json:"refusals,omitempty"`
}

// MaxDiffChanges bounds the field changes listed per object.
const MaxDiffChanges = 100

// Controller describes the controller answering.
type Controller struct {
	Version  string         `json:"version"`
	Started  time.Time      `json:"started"`
	Revision int64          `json:"revision"`
	Store    string         `json:"store"` // "embedded" or "external"
	Objects  map[string]int `json:"objects"`
}

// Status is the body of GET /v1/status: the controller and every node
// status found under /azgate/status/, grouped by role and ordered by name.
type Status struct {
	Controller Controller                    `json:"controller"`
	Nodes      map[string][]model.NodeStatus `json:"nodes"`
	// Errors lists status entries that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// DDoSEvents is the body of GET /v1/ddos/events: the DDoS detection's
// decisions this controller made, oldest first (a bounded history).
type DDoSEvents struct {
	// Enabled is false when the controller runs with --ddos=false.
	Enabled bool `json:"enabled"`
	// Acting says whether this controller holds the DDoS ownership scope
	// (only the holder decides; another controller's history is empty).
	Acting bool              `json:"acting"`
	Holder string            `json:"holder"`
	Events []model.DDoSEvent `json:"events"`
	// BadReports lists the edges' rate reports that could not be read.
	BadReports []string `json:"badReports,omitempty"`
}

// DDoSRate is one address's rates summed over the edges reporting it.
type DDoSRate struct {
	Address netip.Addr `json:"address"`
	PPS     float64    `json:"pps"`
	BPS     float64    `json:"bps"`
	SYNPS   float64    `json:"synps"`
	Edges   int        `json:"edges"`
}

// DDoSRates is the body of GET /v1/ddos/rates.
type DDoSRates struct {
	// Edges is how many edges' reports count: the edge is in a set of the
	// desired state and its report is fresh (docs/ddos.md).
	Edges int        `json:"edges"`
	Rates []DDoSRate `json:"rates"`
}

// AuditRecord is one change made through the API (GET /v1/audit).
type AuditRecord struct {
	// Revision is the store's revision the change was committed at.
	Revision int64 `json:"revision"`
	// Who is the token's name, Role its role.
	Who  string `json:"who"`
	Role string `json:"role,omitempty"`
	// Method and Path of the request.
	Method string `json:"method"`
	Path   string `json:"path"`
	// Objects the change put or deleted (the first 100; Omitted counts
	// the others).
	Objects []AuditObject `json:"objects,omitempty"`
	Omitted int           `json:"omitted,omitempty"`
	// Time the controller committed it (UTC).
	Time time.Time `json:"time"`
}

// AuditObject is one object an audited change put or deleted.
type AuditObject struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Action string `json:"action"` // put or delete
}

// AuditPage answers GET /v1/audit: the newest records first; Continue,
// when set, is the continue= of the next (older) page.
type AuditPage struct {
	Items    []AuditRecord `json:"items"`
	Continue string        `json:"continue,omitempty"`
}
