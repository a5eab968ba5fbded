package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// fakeSource returns its events, then ErrMonitorClosed.
type fakeSource struct{ evs []dataplane.MonitorEvent }

func (f *fakeSource) SetDeadline(time.Time) {}

func (f *fakeSource) Read(ev *dataplane.MonitorEvent) error {
	if len(f.evs) == 0 {
		return dataplane.ErrMonitorClosed
	}
	*ev, f.evs = f.evs[0], f.evs[1:]
	return nil
}

// TestReadSkipsBacklog: the events written before the reader started (a
// full ring's oldest records) are not shown, the later ones are.
func TestReadSkipsBacklog(t *testing.T) {
	frame := udpFrame("203.0.113.10", "198.51.100.7", 1, 2)
	src := &fakeSource{}
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 11 * time.Second} {
		src.evs = append(src.evs, dataplane.MonitorEvent{Time: at, Kind: dataplane.MonDrop, Reason: "drop_ip_csum", Data: frame})
	}
	var got []time.Duration
	n, err := Read(context.Background(), src, Options{Since: 10 * time.Second}, func(ev *dataplane.MonitorEvent, _ dataplane.Tuple) error {
		got = append(got, ev.Time)
		return nil
	})
	if err != dataplane.ErrMonitorClosed {
		t.Fatalf("Read: %v", err)
	}
	if n != 2 || len(got) != 2 || got[0] != 10*time.Second || got[1] != 11*time.Second {
		t.Errorf("shown %d: %v, want the events at 10s and 11s", n, got)
	}
}
