package pathcomp

import (
	"fmt"
	"math"
	"time"
)

// HopRecord is a hop's smoothed state as the service persists it (in
// Redis, docs/pathd.md) and loads it back at startup: what Ingest would
// have built from the hop's reports, so a restarted server, or one that
// joins a cluster, carries on from the cluster's figures rather than from
// nothing.
type HopRecord struct {
	From, To string
	ToOrigin bool
	RTTms    float64 // smoothed RTT in ms; NaN: never reported available
	Loss     float64 // smoothed loss, 0..1
	Up       bool    // the last report said available
	Last     time.Time
}

// Validate checks r as Measurement.Validate checks a report: a record
// read back from a store shared with other processes is outside input.
func (r HopRecord) Validate() error {
	m := Measurement{From: r.From, To: r.To, ToOrigin: r.ToOrigin, Loss: r.Loss, At: r.Last}
	if !math.IsNaN(r.RTTms) {
		if math.IsInf(r.RTTms, 0) || r.RTTms < 0 || r.RTTms > float64(MaxRTT/time.Millisecond) {
			return fmt.Errorf("hop record %s→%s: rtt: %v ms outside 0..%v", r.From, r.To, r.RTTms, MaxRTT)
		}
	} else if r.Up {
		return fmt.Errorf("hop record %s→%s: up: set with no RTT", r.From, r.To)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("hop record: %w", err)
	}
	return nil
}

// Record returns from→to's smoothed state.
func (s *Store) Record(from, to string) (HopRecord, bool) {
	f, ok1 := s.ids[from]
	t, ok2 := s.ids[to]
	if !ok1 || !ok2 {
		return HopRecord{}, false
	}
	i, ok := s.hopIdx[hopKey{f, t}]
	if !ok {
		return HopRecord{}, false
	}
	return s.record(&s.hops[i]), true
}

// Records returns every hop's smoothed state, in the order hops were
// first seen.
func (s *Store) Records() []HopRecord {
	out := make([]HopRecord, len(s.hops))
	for i := range s.hops {
		out[i] = s.record(&s.hops[i])
	}
	return out
}

func (s *Store) record(h *hop) HopRecord {
	return HopRecord{
		From: s.nodes[h.key.from].name, To: s.nodes[h.key.to].name, ToOrigin: s.nodes[h.key.to].origin,
		RTTms: h.rtt, Loss: h.loss, Up: h.up, Last: time.Unix(0, h.last),
	}
}

// Restore sets a hop's smoothed state from r when r is newer than what
// the Store holds (r.Last after the hop's last report): the newest state
// wins, so records written by several servers of a cluster, read in any
// order, leave each hop as the server that saw its latest report had it.
// It returns whether r was taken. It checks r like Ingest checks a report
// (validity, Last no more than MaxSkew after now, kinds, bounds) and
// counts nothing in Stats: a record from the future would, like such a
// report, make every later report of its hop stale and keep the hop live
// (and unexpired) until then.
func (s *Store) Restore(r HopRecord, now time.Time) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	if r.Last.After(now.Add(s.cfg.MaxSkew)) {
		return false, fmt.Errorf("hop record %s→%s: last: %v is more than %v after now (%v)", r.From, r.To, r.Last, s.cfg.MaxSkew, now)
	}
	fi, fok := s.ids[r.From]
	ti, tok := s.ids[r.To]
	if fok && s.nodes[fi].origin {
		return false, fmt.Errorf("hop record %s→%s: from: node %s: %w: known as origin", r.From, r.To, r.From, ErrKindClash)
	}
	if tok && s.nodes[ti].origin != r.ToOrigin {
		return false, fmt.Errorf("hop record %s→%s: to: node %s: %w: known as %s, recorded as %s", r.From, r.To, r.To, ErrKindClash, kind(s.nodes[ti].origin), kind(r.ToOrigin))
	}
	var i int32
	ok := false
	if fok && tok {
		i, ok = s.hopIdx[hopKey{fi, ti}]
	}
	at := r.Last.UnixNano()
	if ok && at <= s.hops[i].last {
		return false, nil
	}
	if !ok {
		newNodes := 0
		if !fok {
			newNodes++
		}
		if !tok {
			newNodes++
		}
		if len(s.nodes)+newNodes > s.cfg.MaxNodes {
			return false, fmt.Errorf("hop record %s→%s: nodes: %w (%d)", r.From, r.To, ErrTooMany, s.cfg.MaxNodes)
		}
		if len(s.hops) >= s.cfg.MaxHops {
			return false, fmt.Errorf("hop record %s→%s: hops: %w (%d)", r.From, r.To, ErrTooMany, s.cfg.MaxHops)
		}
		if !fok {
			fi = s.intern(r.From, false)
		}
		if !tok {
			ti = s.intern(r.To, r.ToOrigin)
		}
		k := hopKey{fi, ti}
		i = int32(len(s.hops))
		s.hops = append(s.hops, hop{key: k})
		s.hopIdx[k] = i
	}
	h := &s.hops[i]
	h.rtt, h.loss, h.up, h.last = r.RTTms, r.Loss, r.Up, at
	if math.IsNaN(r.RTTms) {
		h.loss = 0
	}
	return true, nil
}

// Forget drops every hop whose last report is older than before, and
// every node no hop is left to name. It returns what it dropped. Without
// it a hop that is never reported again stays for good (failed): a relay
// retired months ago, a typo'd name from a buggy prober, each a slot of
// MaxHops. Node indexes change: a Graph taken before stays valid (it
// copied), and a Path's cached indexes are checked by name
// (Graph.index), so old Paths still cost right.
func (s *Store) Forget(before time.Time) (hops, nodes int) {
	cut := before.UnixNano()
	keepNode := make([]bool, len(s.nodes))
	kept := s.hops[:0]
	for _, h := range s.hops {
		if h.last < cut {
			hops++
			continue
		}
		keepNode[h.key.from], keepNode[h.key.to] = true, true
		kept = append(kept, h)
	}
	if hops == 0 {
		return 0, 0
	}
	renum := make([]int32, len(s.nodes))
	nn := s.nodes[:0]
	for i, n := range s.nodes {
		if !keepNode[i] {
			nodes++
			renum[i] = -1
			continue
		}
		renum[i] = int32(len(nn))
		nn = append(nn, n)
	}
	// Fresh maps: Go maps never shrink, and the point is to give memory back.
	clear(s.nodes[len(nn):]) // drop the forgotten names
	s.nodes = nn
	s.ids = make(map[string]int32, len(nn))
	for i, n := range nn {
		s.ids[n.name] = int32(i)
	}
	s.hopIdx = make(map[hopKey]int32, len(kept))
	for i := range kept {
		h := &kept[i]
		h.key = hopKey{renum[h.key.from], renum[h.key.to]}
		s.hopIdx[h.key] = int32(i)
	}
	s.hops = kept
	return hops, nodes
}
