// Package mmdbtest writes small MaxMind DB format files (binary search tree,
// data section, metadata; format version 2.0) for tests and benchmarks.
//
// It exists because no MaxMind DB writer module is served here
// (github.com/maxmind/mmdbwriter is not in the package lists). It is not a
// general writer: the whole tree is built in memory, each network's record is
// encoded once (no deduplication or pointers), and IPv4 networks live in the
// ::/96 subtree the way MaxMind's IPv6 databases keep them (no ::ffff:0:0/96
// or 6to4/Teredo aliases; readers such as maxminddb-golang and gdnsd unmap
// IPv4-mapped addresses themselves).
package mmdbtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Record is the data stored for one network. Supported value types:
// string, float64 (double), float32, bool, uint16, uint32, uint64, int32,
// int (written as uint32 when non-negative, int32 otherwise), Record or
// map[string]any (map), and []any (array).
type Record = map[string]any

// Writer collects networks and writes a MaxMind DB file.
type Writer struct {
	// DatabaseType goes to the metadata's database_type, e.g. "GeoIP2-City".
	DatabaseType string
	// Description goes to the metadata's description map under "en".
	Description string
	// BuildEpoch is the metadata's build_epoch; zero means time.Now().
	BuildEpoch time.Time
	// RecordSize is 24, 28 or 32 bits; zero picks the smallest that fits.
	RecordSize int

	root    *node
	records []Record
}

// node is a search-tree node; for each side either child is set or leaf is a
// record index (-1: no data).
type node struct {
	child [2]*node
	leaf  [2]int
}

func newNode(l0, l1 int) *node { return &node{leaf: [2]int{l0, l1}} }

// New returns a Writer for an IPv6 (ip_version 6) database that holds both
// IPv4 and IPv6 networks.
func New(databaseType string) *Writer {
	return &Writer{DatabaseType: databaseType, root: newNode(-1, -1)}
}

// Insert stores rec for prefix. A more specific network inserted before or
// after a less specific one keeps its own record (longest match), and
// inserting the same prefix twice replaces the record.
func (w *Writer) Insert(prefix netip.Prefix, rec Record) error {
	if !prefix.IsValid() {
		return fmt.Errorf("mmdbtest: invalid prefix %v", prefix)
	}
	prefix = prefix.Masked()
	addr, bits := prefix.Addr(), prefix.Bits()
	if addr.Is4() {
		var b [16]byte // ::a.b.c.d, not ::ffff:a.b.c.d
		a4 := addr.As4()
		copy(b[12:], a4[:])
		addr = netip.AddrFrom16(b)
		bits += 96
	}
	idx := len(w.records)
	w.records = append(w.records, rec)
	ip := addr.As16()
	if bits == 0 {
		for side := 0; side < 2; side++ {
			w.root.setSide(side, idx)
		}
		return nil
	}
	n := w.root
	for i := 0; i < bits; i++ {
		b := int(ip[i/8]>>(7-uint(i%8))) & 1
		if i == bits-1 {
			n.setSide(b, idx)
			break
		}
		if n.child[b] == nil {
			n.child[b] = newNode(n.leaf[b], n.leaf[b])
			n.leaf[b] = -1
		}
		n = n.child[b]
	}
	return nil
}

// setSide makes side of n hold idx: a leaf is replaced; a subtree keeps the
// records of its more specific networks and idx fills its empty leaves.
func (n *node) setSide(side, idx int) {
	if n.child[side] == nil {
		n.leaf[side] = idx
		return
	}
	n.child[side].fillEmpty(idx)
}

func (n *node) fillEmpty(idx int) {
	for s := 0; s < 2; s++ {
		if n.child[s] != nil {
			n.child[s].fillEmpty(idx)
		} else if n.leaf[s] < 0 {
			n.leaf[s] = idx
		}
	}
}

// Bytes returns the database file's bytes.
func (w *Writer) Bytes() ([]byte, error) {
	// Number the nodes breadth first; root is 0.
	var nodes []*node
	ids := map[*node]int{}
	queue := []*node{w.root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		ids[n] = len(nodes)
		nodes = append(nodes, n)
		for s := 0; s < 2; s++ {
			if n.child[s] != nil {
				queue = append(queue, n.child[s])
			}
		}
	}
	// Data section: the records actually referenced, each once.
	var data bytes.Buffer
	offsets := map[int]int{}
	for _, n := range nodes {
		for s := 0; s < 2; s++ {
			if n.child[s] != nil || n.leaf[s] < 0 {
				continue
			}
			if _, ok := offsets[n.leaf[s]]; ok {
				continue
			}
			offsets[n.leaf[s]] = data.Len()
			if err := encode(&data, w.records[n.leaf[s]]); err != nil {
				return nil, err
			}
		}
	}
	nodeCount := len(nodes)
	maxVal := uint64(nodeCount) + 16 + uint64(data.Len())
	recordSize := w.RecordSize
	if recordSize == 0 {
		recordSize = 24
		if maxVal >= 1<<24 {
			recordSize = 28
		}
		if maxVal >= 1<<28 {
			recordSize = 32
		}
	}
	if recordSize != 24 && recordSize != 28 && recordSize != 32 {
		return nil, fmt.Errorf("mmdbtest: record size %d, want 24, 28 or 32", recordSize)
	}
	if maxVal >= 1<<uint(recordSize) {
		return nil, fmt.Errorf("mmdbtest: database too large for %d-bit records (%d nodes, %d data bytes)", recordSize, nodeCount, data.Len())
	}
	var out bytes.Buffer
	for _, n := range nodes {
		var pair [2]uint64
		for s := 0; s < 2; s++ {
			var v uint64
			switch {
			case n.child[s] != nil:
				v = uint64(ids[n.child[s]])
			case n.leaf[s] < 0:
				v = uint64(nodeCount)
			default:
				v = uint64(nodeCount) + 16 + uint64(offsets[n.leaf[s]])
			}
			pair[s] = v
		}
		l, r := pair[0], pair[1]
		switch recordSize {
		case 24:
			out.Write([]byte{byte(l >> 16), byte(l >> 8), byte(l), byte(r >> 16), byte(r >> 8), byte(r)})
		case 28:
			// The middle byte's high nibble is the left record's top bits.
			out.Write([]byte{byte(l >> 16), byte(l >> 8), byte(l), byte(l>>24)<<4 | byte(r>>24)&0x0f, byte(r >> 16), byte(r >> 8), byte(r)})
		case 32:
			out.Write(binary.BigEndian.AppendUint32(nil, uint32(l)))
			out.Write(binary.BigEndian.AppendUint32(nil, uint32(r)))
		}
	}
	out.Write(make([]byte, 16)) // data section separator
	out.Write(data.Bytes())
	out.WriteString("\xab\xcd\xefMaxMind.com")
	epoch := w.BuildEpoch
	if epoch.IsZero() {
		epoch = time.Now()
	}
	meta := Record{
		"node_count":                  uint32(nodeCount),
		"record_size":                 uint16(recordSize),
		"ip_version":                  uint16(6),
		"database_type":               w.DatabaseType,
		"languages":                   []any{"en"},
		"binary_format_major_version": uint16(2),
		"binary_format_minor_version": uint16(0),
		"build_epoch":                 uint64(epoch.Unix()),
		"description":                 Record{"en": w.Description},
	}
	if err := encode(&out, meta); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// WriteFile writes the database to path through a temporary file in the same
// directory and a rename, the way a database update is expected to arrive.
func (w *Writer) WriteFile(path string) error {
	b, err := w.Bytes()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".mmdbtest-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// Data section type numbers (MaxMind DB format 2.0).
const (
	tString  = 2
	tDouble  = 3
	tUint16  = 5
	tUint32  = 6
	tMap     = 7
	tInt32   = 8
	tUint64  = 9
	tArray   = 11
	tBoolean = 14
	tFloat   = 15
)

// ctrl writes a control byte (and the extended type byte) for typ and size.
func ctrl(b *bytes.Buffer, typ int, size int) {
	var first byte
	if typ <= 7 {
		first = byte(typ << 5)
	}
	var ext []byte
	switch {
	case size < 29:
		first |= byte(size)
	case size < 29+256:
		first |= 29
		ext = []byte{byte(size - 29)}
	case size < 285+65536:
		first |= 30
		s := size - 285
		ext = []byte{byte(s >> 8), byte(s)}
	default:
		first |= 31
		s := size - 65821
		ext = []byte{byte(s >> 16), byte(s >> 8), byte(s)}
	}
	b.WriteByte(first)
	if typ > 7 {
		b.WriteByte(byte(typ - 7))
	}
	b.Write(ext)
}

func uintBytes(v uint64) []byte {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], v)
	i := 0
	for i < 8 && buf[i] == 0 {
		i++
	}
	return buf[i:]
}

func encode(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case string:
		ctrl(b, tString, len(x))
		b.WriteString(x)
	case float64:
		ctrl(b, tDouble, 8)
		b.Write(binary.BigEndian.AppendUint64(nil, math.Float64bits(x)))
	case float32:
		ctrl(b, tFloat, 4)
		b.Write(binary.BigEndian.AppendUint32(nil, math.Float32bits(x)))
	case bool:
		n := 0
		if x {
			n = 1
		}
		ctrl(b, tBoolean, n)
	case uint16:
		p := uintBytes(uint64(x))
		ctrl(b, tUint16, len(p))
		b.Write(p)
	case uint32:
		p := uintBytes(uint64(x))
		ctrl(b, tUint32, len(p))
		b.Write(p)
	case uint64:
		p := uintBytes(x)
		ctrl(b, tUint64, len(p))
		b.Write(p)
	case int32:
		p := uintBytes(uint64(uint32(x)))
		ctrl(b, tInt32, len(p))
		b.Write(p)
	case int:
		if x >= 0 && x <= math.MaxUint32 {
			return encode(b, uint32(x))
		}
		if x >= math.MinInt32 && x < 0 {
			return encode(b, int32(x))
		}
		return fmt.Errorf("mmdbtest: int %d out of range", x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		ctrl(b, tMap, len(keys))
		for _, k := range keys {
			ctrl(b, tString, len(k))
			b.WriteString(k)
			if err := encode(b, x[k]); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case []any:
		ctrl(b, tArray, len(x))
		for i, e := range x {
			if err := encode(b, e); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	default:
		return fmt.Errorf("mmdbtest: unsupported value type %T", v)
	}
	return nil
}
