package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// Optimistic concurrency (docs/api.md, "Concurrent edits"): GET answers
// an object with its revision as ETag; a PUT or DELETE sent with that
// revision in If-Match is refused (412, PreconditionFailed) if anyone
// changed the object since, so two edits at once cannot silently lose one.

// PreconditionFailed is the API's 412: the object is no longer at the
// revision the request named (If-Match). Current is its revision now (0:
// it does not exist). Nothing was written.
type PreconditionFailed struct {
	*APIError
	Current int64
}

func (e *PreconditionFailed) Unwrap() error { return e.APIError }

// IsPreconditionFailed reports whether err is (or wraps) a 412.
func IsPreconditionFailed(err error) bool {
	var pf *PreconditionFailed
	return errors.As(err, &pf)
}

// parseETag reads a strong ETag holding a revision ("1234"); 0 if absent.
func parseETag(h http.Header) int64 {
	v, ok := strings.CutPrefix(h.Get("ETag"), `"`)
	if !ok {
		return 0
	}
	rev, _ := strconv.ParseInt(strings.TrimSuffix(v, `"`), 10, 64)
	return rev
}

func ifMatch(rev int64) http.Header {
	if rev <= 0 {
		return nil
	}
	return http.Header{"If-Match": {`"` + strconv.FormatInt(rev, 10) + `"`}}
}

// GetRevision returns one object and its revision (its ETag), to send
// back with PutIf or DeleteIf.
func (c *Client) GetRevision(ctx context.Context, kind, key string) (model.Object, int64, error) {
	o, err := model.New(kind)
	if err != nil {
		return nil, 0, err
	}
	_, h, err := c.doHeader(ctx, http.MethodGet, objectPath(kind, key), nil, nil, o)
	if err != nil {
		return nil, 0, err
	}
	return o, parseETag(h), nil
}

// PutIf replaces an object if it is still at revision rev (from
// GetRevision; 0: unconditionally, as Put). Result.ETag is the object's
// revision after the write.
func (c *Client) PutIf(ctx context.Context, o model.Object, rev int64) (Result, error) {
	return c.writeIf(ctx, http.MethodPut, objectPath(model.KindOf(o), o.Key()), rev, o)
}

// DeleteIf removes an object if it is still at revision rev (0:
// unconditionally, as Delete).
func (c *Client) DeleteIf(ctx context.Context, kind, key string, rev int64) (Result, error) {
	return c.writeIf(ctx, http.MethodDelete, objectPath(kind, key), rev, nil)
}

func (c *Client) writeIf(ctx context.Context, method, path string, rev int64, in any) (Result, error) {
	var w api.Write
	_, h, err := c.doHeader(ctx, method, path, ifMatch(rev), in, &w)
	if err != nil {
		return Result{}, err
	}
	return Result{Revision: w.Revision, Action: w.Action, Object: w.Object, ETag: parseETag(h), Warnings: w.Warnings, DryRun: w.DryRun, Refusals: w.Refusals}, nil
}

// EditAttempts bounds Edit's read-modify-write rounds.
const EditAttempts = 5

// Edit is a read-modify-write of one object that loses no concurrent
// change: it reads the object with its revision, lets edit change it (an
// error from edit ends Edit, nothing written) and puts it back on the
// condition that it is still at that revision. If another writer got
// there first (412) it reads the object again and reapplies edit, at most
// EditAttempts times; then it fails with a *PreconditionFailed saying so.
// It returns the result of the write and the object as written.
func (c *Client) Edit(ctx context.Context, kind, key string, edit func(model.Object) error) (Result, model.Object, error) {
	var last error
	for range EditAttempts {
		o, rev, err := c.GetRevision(ctx, kind, key)
		if err != nil {
			return Result{}, nil, err
		}
		if err := edit(o); err != nil {
			return Result{}, nil, err
		}
		res, err := c.PutIf(ctx, o, rev)
		if err == nil {
			return res, o, nil
		}
		if !IsPreconditionFailed(err) {
			return Result{}, nil, err
		}
		last = err
	}
	var pf *PreconditionFailed
	errors.As(last, &pf)
	return Result{}, nil, &PreconditionFailed{Current: pf.Current, APIError: &APIError{Status: pf.Status, Fields: pf.Fields,
		Message: fmt.Sprintf("%s %q changed under this edit %d times in a row (others are editing it): nothing was written; check it and run the command again (last answer: %s)",
			model.Singular(kind), key, EditAttempts, pf.Message)}}
}
