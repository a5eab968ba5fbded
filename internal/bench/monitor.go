package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// monitorState is one setting of the monitor (lib/monitor.h) the cost is
// measured in.
type monitorState struct {
	name   string
	cfg    dataplane.MonitorConfig
	listen bool // a reader drains the ring while the path is timed
}

var monitorStates = []monitorState{
	{name: "monitor off"},
	{name: "monitor drops (100/s per CPU, the default), no listener", cfg: dataplane.MonitorConfig{Drops: true, Rate: 100}},
	{name: "monitor drops (100/s per CPU, the default), listener", cfg: dataplane.MonitorConfig{Drops: true, Rate: 100}, listen: true},
	{name: "monitor trace (100/s per CPU), no listener", cfg: dataplane.MonitorConfig{Trace: true, Rate: 100}},
	{name: "monitor trace (100/s per CPU), listener", cfg: dataplane.MonitorConfig{Trace: true, Rate: 100}, listen: true},
	{name: "monitor trace (1,000,000/s per CPU: every packet), listener", cfg: dataplane.MonitorConfig{Trace: true, Rate: dataplane.MaxMonitorRate, Burst: dataplane.MaxMonitorRate}, listen: true},
}

// monitorCost times a drop path and a forward path of the edge in each
// monitor state, the states interleaved in every round with the floor
// timed in the same round; a state's figure is the median over the rounds
// of (path - floor), each difference made of one round's paired samples.
// It leaves the monitor off.
func monitorCost(n *nsBed, s *side, rounds int, cases []nsCase) (out []Result, err error) {
	e := s.edge
	if e == nil {
		return nil, errors.New("monitor cost: no edge")
	}
	defer func() {
		if e2 := e.SetMonitor(dataplane.MonitorConfig{}); err == nil && e2 != nil {
			err = e2
		}
	}()
	r, err := e.OpenMonitor()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	sides := make([]*side, len(monitorStates))
	for i, st := range monitorStates {
		sides[i] = &side{name: "mon" + fmt.Sprint(i) + " " + st.name, progs: s.progs}
	}
	base := len(n.s["floor"]) // the suite's own rounds came first
	for round := 0; round < rounds; round++ {
		if err := n.calibrate(cases[0].frame); err != nil {
			return nil, err
		}
		for _, c := range cases {
			for i, st := range monitorStates {
				if err := e.SetMonitor(st.cfg); err != nil {
					return nil, err
				}
				var stop func()
				if st.listen {
					stop = drain(r)
				}
				err := n.timeCase(sides[i], c)
				if stop != nil {
					stop()
				}
				if err != nil {
					return nil, err
				}
			}
		}
	}
	counts, err := e.MonitorCounts()
	if err != nil {
		return nil, err
	}
	for _, c := range cases {
		for i, st := range monitorStates {
			key := sides[i].name + "/" + c.name
			var diffs []float64
			for round := 0; round < rounds; round++ {
				v, k := n.s[key][round], base+round
				if c.chain {
					v += n.s["pass"][k] - n.s[key+"/cal"][round]
					if c.moves {
						v -= max(n.s["adjust2"][k]-n.s["pass"][k], 0) / 2
					}
				}
				diffs = append(diffs, v-n.s["floor"][k])
			}
			out = append(out, Result{Suite: "dataplane", Name: c.name + ", " + st.name, Value: median(diffs), Unit: "ns/packet above the floor",
				Note: fmt.Sprintf("median of %d paired (path - floor) samples; over the whole run the monitor wrote %d events, %d refused by the rate limit, %d by a full ring",
					rounds, counts.Sent, counts.LostRate, counts.LostFull)})
		}
	}
	return out, nil
}

// drain reads r until the returned stop is called.
func drain(r *dataplane.MonitorReader) (stop func()) {
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		var ev dataplane.MonitorEvent
		for {
			select {
			case <-quit:
				return
			default:
			}
			r.SetDeadline(timeSoon())
			_ = r.Read(&ev)
		}
	}()
	return func() { close(quit); <-done }
}

func timeSoon() time.Time { return time.Now().Add(20 * time.Millisecond) }
