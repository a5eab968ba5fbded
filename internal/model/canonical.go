package model

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"sync"
	"time"
)

// decodeCanonical is DecodeStored's fast path. It decodes data into a fresh
// object of the kind with json.Unmarshal, encodes that object again the way
// the store writes objects (store.Encode is json.Marshal: HTML-escaped,
// compact, no trailing newline) and reports ok only if the encoding is
// byte for byte data. Then Decode would have returned the same object and
// no error; otherwise (ok false) the caller must run Decode, whose
// answer, error text included, is the one that counts.
//
// Why equal bytes make Decode's checks pass (every one of them, so none is
// weakened):
//
//   - Invalid JSON, a value that does not fit its field, and non-blank
//     trailing data: json.Unmarshal refuses them as Decode's decoder does
//     (it validates the whole input first, then decodes with the same
//     decodeState), and any error here means ok is false. Blank trailing
//     data decodes but is not in the encoding, so the bytes differ.
//   - Unknown fields: json.Unmarshal skips them and the encoder does not
//     write what the object does not hold, so the bytes differ.
//   - Keys differing from a field only by case: the decoder matches them
//     to the field, but the encoder writes the field's own name; the
//     bytes differ.
//   - Duplicate keys (by their unquoted text, as checkKeys compares them):
//     the encoder writes each struct field at most once and one key per
//     map entry, and the two members of a duplicate land in one field or
//     one map entry (a key decodes to the same field or map key each
//     time), so the encoding has fewer members than data; the bytes
//     differ.
//   - Nesting deeper than maxKeyDepth: the encoding nests no deeper than
//     the type does, and canonicalType admits only types that nest at
//     most maxKeyDepth levels (no recursion, no interfaces).
//
// The argument needs the encoder to write every value by its type's
// structure: a json.Marshaler may write anything (duplicate keys, other
// names), so canonicalType refuses types holding one, except those known
// to write a JSON string (canonicalMarshalers). A TextMarshaler is always
// written as a JSON string. With those, data equal to the encoding is
// exactly what checkKeys walks without complaint, and Decode's
// json.Decoder, given the same bytes, fills the object the same way.
func decodeCanonical(kind string, data []byte) (Object, bool) {
	if kind == KindHost {
		return decodeHostCanonical(data)
	}
	var o Object
	var err error
	if kind == KindGuestCopy {
		o = new(GuestCopy)
	} else {
		o, err = New(kind)
	}
	if err != nil || !canonicalType(reflect.TypeOf(o)) {
		return nil, false
	}
	if json.Unmarshal(data, o) != nil {
		return nil, false
	}
	return o, encodesTo(o, data)
}

// decodeHostCanonical is decodeCanonical of a host, decoded into a pooled
// host whose guests are then copied into a slice of their exact size:
// decoding 1,000 guests into a nil slice grows it a dozen times, twice
// the guests' size in garbage. The pooled guests are all zero (cleared
// when put back), so the decoder, which fills the elements past len in
// place, fills them as it would fresh ones. An absent "guests" leaves
// the buffer in place, and a fresh host's nil is put back.
func decodeHostCanonical(data []byte) (Object, bool) {
	if !canonicalType(reflect.TypeFor[*Host]()) {
		return nil, false
	}
	sh := hostPool.Get().(*Host)
	buf := sh.Guests[:0]
	defer func() {
		if g := sh.Guests; cap(g) > cap(buf) && cap(g) <= maxPooledGuests {
			buf = g[:0]
		}
		clear(buf[:cap(buf)])
		*sh = Host{Guests: buf}
		hostPool.Put(sh)
	}()
	if json.Unmarshal(data, sh) != nil {
		return nil, false
	}
	h := new(Host)
	*h = *sh
	if len(sh.Guests) == 0 && cap(sh.Guests) > 0 {
		// Still the pooled buffer: data has no "guests", which leaves
		// a fresh host's nil (the decoder makes "guests":[] a slice of
		// capacity 0 and null nil).
		h.Guests = nil
	} else if sh.Guests != nil {
		h.Guests = make([]Guest, len(sh.Guests))
		copy(h.Guests, sh.Guests)
	}
	return h, encodesTo(h, data)
}

// maxPooledGuests bounds the guests buffer the host pool keeps.
const maxPooledGuests = 1 << 16

var hostPool = sync.Pool{New: func() any { return new(Host) }}

// encodesTo reports whether o encodes, as json.Marshal does, to data.
func encodesTo(o Object, data []byte) bool {
	c := canonPool.Get().(*canonEncoder)
	defer canonPool.Put(c)
	c.want, c.equal = data, false
	err := c.enc.Encode(o)
	ok := err == nil && c.equal
	c.want = nil
	return ok
}

// canonEncoder compares what its Encoder writes with want. Encode writes
// json.Marshal's bytes and a newline in one Write (and nothing when it
// fails).
type canonEncoder struct {
	want  []byte
	equal bool
	enc   *json.Encoder
}

func (c *canonEncoder) Write(p []byte) (int, error) {
	n := len(c.want)
	c.equal = len(p) == n+1 && p[n] == '\n' && bytes.Equal(p[:n], c.want)
	return len(p), nil
}

var canonPool = sync.Pool{New: func() any {
	c := &canonEncoder{}
	c.enc = json.NewEncoder(c) // HTML escaping on, no indent: as json.Marshal
	return c
}}

// canonicalMarshalers are the json.Marshalers of the model whose
// MarshalJSON writes a JSON string and nothing else.
var canonicalMarshalers = map[reflect.Type]bool{
	reflect.TypeFor[Duration](): true,
	// time.Time writes an RFC 3339 string (EIP.Previous.Until).
	reflect.TypeFor[time.Time](): true,
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

var canonCache sync.Map // reflect.Type -> bool

// canonicalType reports whether decodeCanonical's argument holds for t:
// everything in it is written by its structure (or as a JSON string), and
// it nests at most maxKeyDepth levels.
func canonicalType(t reflect.Type) bool {
	if v, ok := canonCache.Load(t); ok {
		return v.(bool)
	}
	d, ok := jsonDepth(t, map[reflect.Type]bool{})
	ok = ok && d <= maxKeyDepth
	canonCache.Store(t, ok)
	return ok
}

// jsonDepth returns how many levels of JSON arrays and objects the
// encoding of a t may nest (0 for a scalar or a string), and false when
// t may write anything (a json.Marshaler not known to write a string, an
// interface) or nest without bound (a recursive type). onPath holds the
// types being walked, to find recursion.
func jsonDepth(t reflect.Type, onPath map[reflect.Type]bool) (int, bool) {
	if onPath[t] {
		return 0, false
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return 0, canonicalMarshalers[t]
	}
	if t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return 0, true
	}
	onPath[t] = true
	defer delete(onPath, t)
	switch t.Kind() {
	case reflect.Pointer:
		return jsonDepth(t.Elem(), onPath)
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return 0, false
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return 0, true // []byte: a base64 string
		}
		d, ok := jsonDepth(t.Elem(), onPath)
		return d + 1, ok
	case reflect.Map:
		d, ok := jsonDepth(t.Elem(), onPath)
		return d + 1, ok
	case reflect.Struct:
		deepest := 0
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Tag.Get("json") == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			d, ok := jsonDepth(f.Type, onPath)
			if !ok {
				return 0, false
			}
			// (An embedded struct's fields may be the outer object's,
			// one level up: counting a level for it only overestimates.)
			deepest = max(deepest, d)
		}
		return deepest + 1, true
	}
	return 0, true
}
