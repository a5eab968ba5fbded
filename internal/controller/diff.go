package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// fieldDiff lists the fields that differ between two versions of an
// object, by their JSON paths, at most max of them (a last entry "..."
// says there were more).
func fieldDiff(old, new model.Object, limit int) []api.FieldChange {
	a, err1 := toTree(old)
	b, err2 := toTree(new)
	if err1 != nil || err2 != nil {
		return []api.FieldChange{{Field: "(object)", Old: mustJSON(old), New: mustJSON(new)}}
	}
	var out []api.FieldChange
	diffTree("", a, b, &out, limit)
	return out
}

func toTree(o any) (any, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return v, d.Decode(&v)
}

func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

func diffTree(path string, a, b any, out *[]api.FieldChange, limit int) {
	if len(*out) > limit {
		return
	}
	add := func(c api.FieldChange) {
		if len(*out) == limit {
			*out = append(*out, api.FieldChange{Field: "..."})
			return
		}
		*out = append(*out, c)
	}
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(x)+len(y))
			for k := range x {
				keys = append(keys, k)
			}
			for k := range y {
				if _, ok := x[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				p := k
				if path != "" {
					p = path + "." + k
				}
				diffTree(p, x[k], y[k], out, limit)
			}
			return
		}
	case []any:
		if y, ok := b.([]any); ok {
			for i := 0; i < max(len(x), len(y)); i++ {
				var u, v any
				if i < len(x) {
					u = x[i]
				}
				if i < len(y) {
					v = y[i]
				}
				diffTree(fmt.Sprintf("%s[%d]", path, i), u, v, out, limit)
			}
			return
		}
	}
	ja, jb := mustJSON(a), mustJSON(b)
	if !bytes.Equal(ja, jb) {
		if strings.HasSuffix(path, ".password") { // secrets are write-only
			ja, jb = redactJSON(ja), redactJSON(jb)
		}
		add(api.FieldChange{Field: path, Old: ja, New: jb})
	}
}

// redactJSON hides a secret's JSON value (absent stays absent).
func redactJSON(v json.RawMessage) json.RawMessage {
	if v == nil || string(v) == "null" || string(v) == `""` {
		return v
	}
	return mustJSON(model.RedactedSecret)
}
