package monitor

import (
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// StatusSource is a loaded data plane's monitor (dataplane.Edge, dataplane.Agent).
type StatusSource interface {
	Monitor() (dataplane.MonitorConfig, error)
	MonitorCounts() (dataplane.MonitorCounts, error)
}

// Status is the monitor's part of a node status (its mode and counts),
// or an error naming what could not be read.
func Status(src StatusSource) (*model.MonitorStatus, error) {
	c, err := src.Monitor()
	if err != nil {
		return nil, err
	}
	n, err := src.MonitorCounts()
	if err != nil {
		return nil, err
	}
	return &model.MonitorStatus{Mode: c.Mode(), Sent: n.Sent, LostRate: n.LostRate, LostFull: n.LostFull}, nil
}
