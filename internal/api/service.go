package api

import (
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Weight is the body of POST /v1/services/{name}/pools/{pool}/backends/{key}/weight.
type Weight struct {
	Weight *uint32 `json:"weight"` // required; 0 drains the backend
}

// ServiceStatus is the body of GET /v1/services/{name}/status: the
// service, the controller's health verdict, what every edge reports on
// each backend and the tables the edges hold.
type ServiceStatus struct {
	Revision int64          `json:"revision"`
	Service  *model.Service `json:"service"`
	// Health is the stored verdict of the majority (null: nothing down).
	Health *model.Health `json:"health"`
	Pools  []PoolStatus  `json:"pools"`
	// Agree: every pool's Agree.
	Agree bool `json:"agree"`
	// Errors lists edge statuses or reports that could not be read, and
	// the edges' problems with the service (a health check command an
	// edge does not list).
	Errors []string `json:"errors,omitempty"`
}

// PoolStatus is one pool of a service.
type PoolStatus struct {
	Name     string          `json:"name"`
	Backends []BackendStatus `json:"backends"`
	// Tables has one entry per edge that holds the pool's table or should
	// (every edge of a set covering the VIP), ordered by edge name.
	Tables []EdgeTable `json:"tables"`
	// Agree: at least one edge holds the table, and every edge listed
	// holds one with the same checksum.
	Agree bool `json:"agree"`
}

// BackendStatus is one backend with the edges' reports on it.
type BackendStatus struct {
	Key    string `json:"key"`
	Weight uint32 `json:"weight"`
	// Down is the stored verdict (Health); the reports below may already
	// say otherwise while the controller debounces.
	Down      bool         `json:"down"`
	UpVotes   int          `json:"up_votes"`   // edges reporting it up
	DownVotes int          `json:"down_votes"` // edges reporting it down
	Reports   []EdgeReport `json:"reports,omitempty"`
}

// EdgeReport is one edge's health report on a backend.
type EdgeReport struct {
	Edge string `json:"edge"`
	model.HealthReport
}

// EdgeTable is the table an edge reports for a pool.
type EdgeTable struct {
	Edge string `json:"edge"`
	// Missing says why there is no table: "no status" (the edge publishes
	// none) or "no table" (its status lists no table for the pool).
	Missing         string    `json:"missing,omitempty"`
	AppliedRevision int64     `json:"applied_revision,omitempty"`
	Updated         time.Time `json:"updated,omitzero"`
	model.TableStatus
}
