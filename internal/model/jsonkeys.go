package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// checkKeys walks the JSON value in data against type t and refuses what
// encoding/json lets through silently: a key that appears twice in one
// object (the last one would win), and a key that differs from a field's
// name only by case (json matches names case-insensitively, so "VIP" would
// set "vip"). The error names the key's place ("hosts[0].guests[1].vsid").
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkKeys(dec, t, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// maxKeyDepth bounds the nesting walkKeys follows. No object kind nests
// nearly this deep; the bound keeps the walk safe on its own, not only
// behind json.Valid (whose own limit is 10,000).
const maxKeyDepth = 64

func walkKeys(dec *json.Decoder, t reflect.Type, place string, depth int) error {
	if depth > maxKeyDepth {
		return FieldError{Field: place, Msg: fmt.Sprintf("nested deeper than %d levels", maxKeyDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	t = keyedType(t)
	switch d {
	case '{':
		var fields map[string]fieldInfo
		var elem reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = jsonFields(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			at := joinPlace(place, k)
			if seen[k] {
				return FieldError{Field: at, Msg: "duplicate key"}
			}
			seen[k] = true
			child := elem
			if fields != nil {
				f, ok := fields[k]
				if !ok {
					// Folded as encoding/json folds (strings.EqualFold:
					// Unicode simple folding, so "ſ" is an "s" and the
					// Kelvin sign a "k"), not only by ToLower.
					for _, f := range fields {
						if strings.EqualFold(f.name, k) {
							return FieldError{Field: at, Msg: fmt.Sprintf("key %q differs from field %q only by case (keys are case-sensitive)", k, f.name)}
						}
					}
				}
				child = f.typ
			}
			if err := walkKeys(dec, child, at, depth+1); err != nil {
				return err
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkKeys(dec, elem, fmt.Sprintf("%s[%d]", place, i), depth+1); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

func joinPlace(place, k string) string {
	if place == "" {
		return k
	}
	return place + "." + k
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// keyedType strips pointers; it returns nil for types that decode
// themselves (their keys are theirs to check: only duplicates are refused).
func keyedType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	return t
}

type fieldInfo struct {
	name string
	typ  reflect.Type
}

var fieldCache sync.Map // reflect.Type -> map[string]fieldInfo

// jsonFields maps each JSON field name of struct t, and its lower-case
// form, to the field (embedded structs are flattened, as encoding/json
// does).
func jsonFields(t reflect.Type) map[string]fieldInfo {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]fieldInfo)
	}
	m := map[string]fieldInfo{}
	var add func(reflect.Type)
	add = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					add(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fi := fieldInfo{name: name, typ: f.Type}
			m[name] = fi
			if _, ok := m[strings.ToLower(name)]; !ok {
				m[strings.ToLower(name)] = fi
			}
		}
	}
	add(t)
	fieldCache.Store(t, m)
	return m
}
