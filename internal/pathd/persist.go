package pathd

import (
	"context"

	"github.com/azgate/azgate/internal/pathcomp"
	"github.com/azgate/azgate/internal/pathd/hopstore"
)

// load reads every hop of the cluster at startup (from a replica when the
// primary is down) so a restarted or new server starts with the
// cluster's figures. If nothing answers it starts empty with cursor 0:
// the first pull that succeeds then reads every row.
func (s *Server) load(ctx context.Context) {
	if s.cfg.Hops == nil {
		s.mu.Lock()
		s.loaded = true
		s.mu.Unlock()
		return
	}
	l, err := s.cfg.Hops.Load(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = true
	if err != nil {
		s.cnt.loadErrors++
		s.cfg.Log.Error("hop store: load failed; starting empty, reading every row when it answers", "err", err)
		return
	}
	s.restoreLocked(l)
	s.cursor = l.Cursor
	s.cfg.Log.Info("hop store loaded", "from", l.From, "hops", len(l.Records), "malformed", l.Malformed)
}

// restoreLocked takes records another server (or an earlier run) wrote;
// newer ones replace a hop's state (Store.Restore). Caller holds mu.
func (s *Server) restoreLocked(l hopstore.Loaded) {
	s.cnt.malformed += uint64(l.Malformed)
	for _, e := range l.Errs {
		s.cfg.Log.Warn("hop store: malformed row skipped", "err", e)
	}
	now := s.cfg.Now()
	for _, r := range l.Records {
		ok, err := s.store.Restore(r, now)
		switch {
		case err != nil:
			s.cnt.refused++
			s.cfg.Log.Debug("hop store: record refused", "err", err)
		case ok:
			s.cnt.restored++
		}
	}
}

// flush writes the state of the hops changed since the last flush. On
// failure the hops stay dirty and go with the next flush (the store holds
// their state then, not the state now: nothing is lost by waiting).
func (s *Server) flush(ctx context.Context) {
	s.mu.Lock()
	if len(s.dirty) == 0 {
		s.mu.Unlock()
		return
	}
	recs := make([]pathcomp.HopRecord, 0, len(s.dirty))
	keys := make([][2]string, 0, len(s.dirty))
	for k := range s.dirty {
		if r, ok := s.store.Record(k[0], k[1]); ok {
			recs = append(recs, r)
			keys = append(keys, k)
		}
	}
	clear(s.dirty)
	s.mu.Unlock()
	for lo := 0; lo < len(recs); lo += hopstore.MaxSave {
		hi := min(lo+hopstore.MaxSave, len(recs))
		if err := s.cfg.Hops.Save(ctx, recs[lo:hi]); err != nil {
			s.mu.Lock()
			s.cnt.saveErrors++
			for _, k := range keys[lo:] {
				s.dirty[k] = struct{}{}
			}
			s.mu.Unlock()
			s.cfg.Log.Warn("hop store: save failed; retrying at the next flush", "hops", len(recs)-lo, "err", err)
			return
		}
		s.mu.Lock()
		s.cnt.saved += uint64(hi - lo)
		s.mu.Unlock()
	}
}

// pullPages bounds the pages of changes one pull reads (the rest waits
// for the next interval).
const (
	pullPage  = 4096
	pullPages = 64
)

// pull reads the rows the cluster's servers saved since the cursor and
// restores the newer ones, so servers behind one VIP converge on the
// newest figures of every hop.
func (s *Server) pull(ctx context.Context) {
	if s.cfg.Hops == nil {
		return
	}
	for range pullPages {
		s.mu.Lock()
		cur := s.cursor
		s.mu.Unlock()
		l, err := s.cfg.Hops.Changes(ctx, cur, pullPage)
		if err != nil {
			s.mu.Lock()
			s.cnt.changesErrors++
			s.mu.Unlock()
			s.cfg.Log.Debug("hop store: changes", "err", err)
			return
		}
		s.mu.Lock()
		if l.Reset {
			// The store lost its rows (restarted without persistence):
			// write back everything this server holds at the next flush,
			// so a server that starts next finds the cluster's figures.
			for _, r := range s.store.Records() {
				s.dirty[[2]string{r.From, r.To}] = struct{}{}
			}
			s.cnt.resets++
			s.cfg.Log.Warn("hop store: its version went back (data lost?); writing back every hop", "hops", len(s.dirty))
		}
		s.restoreLocked(l)
		s.cursor = l.Cursor
		s.mu.Unlock()
		if !l.More {
			return
		}
	}
}
