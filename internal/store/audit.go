package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// AuditRoot holds the audit log: one key a change made through the API,
// AuditRoot + the 20-digit revision the change was planned at (the
// revision before it), written in the change's last transaction (Op.Raw),
// so that a change and its record go in together. The record's value is
// the caller's (JSON); its mod revision is the change's revision.
const AuditRoot = "/azgate/audit/"

// AuditKey is the audit record key of a change planned at revision base.
func AuditKey(base int64) string { return fmt.Sprintf("%s%020d", AuditRoot, base) }

// AuditRecord is one stored record: its key, value and revision.
type AuditRecord struct {
	Key   string
	Value []byte
	Rev   int64
}

// AuditPage reads at most limit records, newest first, older than the
// key before ("" : from the newest). next is the key to continue from
// ("" when there are no more).
func (s *Store) AuditPage(ctx context.Context, limit int, before string) (recs []AuditRecord, next string, err error) {
	end := clientv3.GetPrefixRangeEnd(AuditRoot)
	if before != "" {
		if !strings.HasPrefix(before, AuditRoot) {
			return nil, "", fmt.Errorf("store: audit: %q is not an audit key", before)
		}
		end = before
	}
	resp, err := s.Client.Get(ctx, AuditRoot, clientv3.WithRange(end),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit)+1))
	if err != nil {
		return nil, "", fmt.Errorf("store: audit: %w", mapErr(err))
	}
	for i, kv := range resp.Kvs {
		if i == limit {
			next = recs[limit-1].Key
			break
		}
		recs = append(recs, AuditRecord{Key: string(kv.Key), Value: kv.Value, Rev: kv.ModRevision})
	}
	return recs, next, nil
}

// TrimAudit deletes the oldest audit records beyond keep, and returns how
// many it deleted.
func (s *Store) TrimAudit(ctx context.Context, keep int) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(AuditRoot)
	resp, err := s.Client.Get(ctx, AuditRoot, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: audit: %w", mapErr(err))
	}
	extra := resp.Count - int64(keep)
	if extra <= 0 {
		return 0, nil
	}
	old, err := s.Client.Get(ctx, AuditRoot, clientv3.WithRange(end), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(extra))
	if err != nil {
		return 0, fmt.Errorf("store: audit: %w", mapErr(err))
	}
	if len(old.Kvs) == 0 { // trimmed meanwhile (another controller)
		return 0, nil
	}
	last := string(old.Kvs[len(old.Kvs)-1].Key)
	del, err := s.Client.Delete(ctx, AuditRoot, clientv3.WithRange(last+"\x00"))
	if err != nil {
		return 0, fmt.Errorf("store: audit: %w", mapErr(err))
	}
	return del.Deleted, nil
}
