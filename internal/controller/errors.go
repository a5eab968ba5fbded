package controller

import (
	"errors"
	"fmt"
	"strings"

	"github.com/azgate/azgate/internal/model"
)

// The Core's typed errors. The Core never sees an HTTP writer: its
// methods fail with these (or model.NotFoundError, model.ConflictError,
// model.Errors from the state's checks, errStore from the store), and
// errorAnswer (http.go) turns each into its status and JSON body.

// NotFoundError: a part of an object the change names (a guest, pool,
// backend, package member, GSLB target) does not exist; 404. A missing
// object itself is a model.NotFoundError, also 404.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// ConflictError: the change contradicts what is stored (the object or
// member already exists); 409, like model.ConflictError (a reference).
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// RevisionError: the object is not at a revision the writer read
// (IfMatch), or changed past the view; 412 with Current (0: it does not
// exist) as the answer's revision and ETag. Nothing was written.
type RevisionError struct {
	Kind, Key string
	Current   int64
	Sent      string // the If-Match header, if known
}

func (e *RevisionError) Error() string {
	what := fmt.Sprintf("%s %q", model.Singular(e.Kind), e.Key)
	sent := ""
	if e.Sent != "" {
		sent = " (If-Match: " + e.Sent + ")"
	}
	if e.Current == 0 {
		return fmt.Sprintf("%s does not exist any more: it was deleted since you read it%s; nothing was written", what, sent)
	}
	return fmt.Sprintf("%s changed since you read it%s: it is now at revision %d; read it again, redo the change and send If-Match: %s; nothing was written",
		what, sent, e.Current, etag(e.Current))
}

// InvalidError: the change (an object, a document) fails validation or the
// state's checks; 422 with the fields at fault.
type InvalidError struct {
	Msg    string
	Fields []model.FieldError
}

func (e *InvalidError) Error() string { return e.Msg }

// KeyMismatchError: a replacement whose key is not the one it replaces
// (the path's); 400 naming the key field.
type KeyMismatchError struct {
	Kind      string
	Key, Body string // the key replaced, and the object's own
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("%s in the request body: %s: %s", model.Singular(e.Kind), keyField(e.Kind), e.msg())
}

func (e *KeyMismatchError) msg() string {
	return fmt.Sprintf("%q does not match %q, the key in the path", e.Body, e.Key)
}

// Field is the field error of the key.
func (e *KeyMismatchError) Field() model.FieldError {
	return model.FieldError{Field: keyField(e.Kind), Msg: e.msg()}
}

// keyField names the field holding an object's key.
func keyField(kind string) string {
	if kind == model.KindEIP {
		return "address"
	}
	return "name"
}

// invalid describes errors of a change to one object: the state's field
// errors become an InvalidError naming the object; others pass.
func invalid(kind, key string, err error) error {
	if err == nil {
		return nil
	}
	var es model.Errors
	if errors.As(err, &es) {
		return &InvalidError{Fields: es, Msg: fmt.Sprintf("invalid %s %q: %s", model.Singular(kind), key, shortList(es))}
	}
	return err
}

// shortList is the errors joined, or their summary when there are many.
func shortList(es model.Errors) string {
	if len(es) <= 3 {
		return es.Error()
	}
	return summary(es)
}

// summary names the first few errors of a long list.
func summary(es model.Errors) string {
	const show = 3
	if len(es) <= show {
		return fmt.Sprintf("%d error(s): %v", len(es), es)
	}
	return fmt.Sprintf("%d errors: %v; and %d more", len(es), es[:show], len(es)-show)
}

// ForceError: the change would take the whole region, a whole kind or a
// last unit out of service (guard.go), and the writer did not say force;
// 409 with api.Error.Force set. Nothing was written.
type ForceError struct{ Reasons []string }

func (e *ForceError) Error() string {
	rs := firstN(e.Reasons, maxRefusals)
	msg := "refused without force: " + strings.Join(rs, "; ")
	if len(e.Reasons) > len(rs) {
		msg += fmt.Sprintf("; and %d more", len(e.Reasons)-len(rs))
	}
	return msg + "; nothing was written (send it again with force, --force on the CLI, to do it)"
}
