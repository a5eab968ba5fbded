package model

import "fmt"

// DecodeStored decodes an object read from the store under key and checks
// it with the same validation the API applies on write. Everything the
// roles program comes through here: the store may hold what the API never
// accepted (a value written straight into etcd with etcdctl or a raw
// client), and such an object must never be programmed (issue 7). The
// error names what is wrong.
func DecodeStored(kind, key string, data []byte) (Object, error) {
	o, ok := decodeCanonical(kind, data)
	if !ok {
		// Not byte for byte what the store writes: the full checks,
		// which name what is wrong.
		var err error
		if kind == KindGuestCopy {
			o, err = decodeGuestCopy(data)
		} else {
			o, err = Decode(kind, data)
		}
		if err != nil {
			return nil, fmt.Errorf("does not decode: %w", err)
		}
	}
	if o.Key() != key {
		return nil, fmt.Errorf("stored under key %q but names itself %q", key, o.Key())
	}
	if es := o.Validate(); len(es) > 0 {
		return nil, fmt.Errorf("invalid: %w", es)
	}
	return o, nil
}
