package monitor

import (
	"context"
	"errors"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// Source is what events are read from (a *dataplane.MonitorReader).
type Source interface {
	Read(*dataplane.MonitorEvent) error
	SetDeadline(time.Time)
}

// Options bound a run of Read.
type Options struct {
	Filter Filter
	Count  int           // stop after this many selected events (0: no bound)
	For    time.Duration // stop after this long (0: no bound)
	// Since skips the events older than this (CLOCK_MONOTONIC, as
	// MonitorEvent.Time): what waits in the ring when a reader starts is
	// not recent but the oldest events since the last reader (a full ring
	// keeps its old records and refuses new ones), possibly days old.
	Since time.Duration
}

// Read reads events from src and calls fn with each one the filter
// selects until ctx is done, Count events were selected or For passed.
// It returns how many were selected.
func Read(ctx context.Context, src Source, o Options, fn func(*dataplane.MonitorEvent, dataplane.Tuple) error) (int, error) {
	var end time.Time
	if o.For > 0 {
		end = time.Now().Add(o.For)
	}
	n := 0
	var ev dataplane.MonitorEvent
	for {
		if ctx.Err() != nil || o.Count > 0 && n >= o.Count || !end.IsZero() && !time.Now().Before(end) {
			return n, nil
		}
		// Wake up now and then to see ctx and the end.
		dl := time.Now().Add(200 * time.Millisecond)
		if !end.IsZero() && end.Before(dl) {
			dl = end
		}
		src.SetDeadline(dl)
		err := src.Read(&ev)
		if errors.Is(err, dataplane.ErrNoEvent) {
			continue
		}
		if err != nil {
			return n, err
		}
		if ev.Time < o.Since {
			continue
		}
		t := dataplane.ParseTuple(ev.Data)
		if !o.Filter.Match(&ev, t) {
			continue
		}
		n++
		if err := fn(&ev, t); err != nil {
			return n, err
		}
	}
}
