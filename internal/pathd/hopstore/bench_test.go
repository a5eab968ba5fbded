package hopstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore/bwstoretest"
	"github.com/azgate/azgate/internal/pathcomp"
)

// BenchmarkRedisSave: one flush of 4,096 changed hops to a real
// redis-server on a unix socket (4 save scripts in one pipeline), then the
// reading side: Changes of the same 4,096 rows, and a Load of 250,000.
func BenchmarkRedisSave(b *testing.B) {
	_, srv := bwstoretest.Redis(b)
	s, err := NewRedis("eu", configOf(srv.Config()), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	recs := make([]pathcomp.HopRecord, MaxSave)
	for i := range recs {
		recs[i] = rec(fmt.Sprint("r", i/64), fmt.Sprint("o", i), float64(i%100)+0.25, t0)
	}
	b.Run("save-4096", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for j := range recs {
				recs[j].Last = t0.Add(time.Duration(i))
			}
			if err := s.Save(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("changes-4096", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			l, _ := s.Load(ctx)
			cur := l.Cursor
			s.Save(ctx, recs)
			b.StartTimer()
			c, err := s.Changes(ctx, cur, 4096)
			if err != nil || len(c.Records) != len(recs) {
				b.Fatalf("%d rows, %v", len(c.Records), err)
			}
		}
		b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("load-250k", func(b *testing.B) {
		b.StopTimer()
		for k := 0; k < 250_000/MaxSave+1; k++ {
			for j := range recs {
				recs[j].From = fmt.Sprint("x", k)
			}
			if err := s.Save(ctx, recs); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for i := 0; i < b.N; i++ {
			l, err := s.Load(ctx)
			if err != nil || len(l.Records) < 250_000 {
				b.Fatalf("%d rows, %v", len(l.Records), err)
			}
		}
	})
}
