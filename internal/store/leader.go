package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leader returns the client endpoint of the member that leads the etcd
// cluster, asking each endpoint for its status: tests and the lab use it
// to kill the leader specifically. Endpoints that do not answer are
// skipped.
func (s *Store) Leader(ctx context.Context) (string, error) {
	var errs []error
	for _, ep := range s.Client.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := s.Client.Status(sctx, ep)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		if st.Leader != 0 && st.Header != nil && st.Header.MemberId == st.Leader {
			return ep, nil
		}
	}
	return "", fmt.Errorf("store: no endpoint is the etcd leader: %w", errors.Join(errs...))
}
