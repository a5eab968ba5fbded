package monitor

import (
	"errors"
	"sync"

	"github.com/azgate/azgate/internal/dataplane"
)

// Switch changes a running role's monitor mode (off, drops, trace)
// without a restart: the role attaches its data plane once loaded
// (Attach), the SIGHUP reload sets the mode (SetMode); the rate and burst
// stay the loaded ones. The zero Switch is ready to use.
type Switch struct {
	mu sync.Mutex
	dp Settable
}

// Settable is a loaded data plane's monitor (dataplane.Edge,
// dataplane.Agent).
type Settable interface {
	Monitor() (dataplane.MonitorConfig, error)
	SetMonitor(dataplane.MonitorConfig) error
}

// Attach makes SetMode act on dp (nil on a nil Switch: a no-op).
func (s *Switch) Attach(dp Settable) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.dp = dp
	s.mu.Unlock()
}

// ErrNotLoaded is SetMode's error before the data plane is loaded.
var ErrNotLoaded = errors.New("monitor: the data plane is not loaded yet")

// SetMode sets the monitor's mode (off, drops, trace), keeping its rate
// and burst, and returns the mode it replaced.
func (s *Switch) SetMode(mode string) (was string, err error) {
	want, err := dataplane.ParseMonitorMode(mode)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dp == nil {
		return "", ErrNotLoaded
	}
	cur, err := s.dp.Monitor()
	if err != nil {
		return "", err
	}
	want.Rate, want.Burst = cur.Rate, cur.Burst
	if err := s.dp.SetMonitor(want); err != nil {
		return "", err
	}
	return cur.Mode(), nil
}
