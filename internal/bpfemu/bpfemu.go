// Package bpfemu replays an eBPF program (its instructions as compiled,
// before the verifier's rewrites) in user space on one XDP frame, over the
// live maps of a loaded copy of the program, and counts what the path
// executed: instructions, helper calls, map lookups and BPF-to-BPF calls.
// The benchmarks (internal/bench) report these counts next to their
// timings.
package bpfemu

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Counting the BPF instructions one packet executes on a path.
//
// The kernel counts nothing per instruction (no hardware counters in these
// VMs, the JIT always on), so the path is replayed in user space: the
// program's instructions as compiled (before the verifier's rewrites),
// executed by a small interpreter over the live maps of the bench bed
// (lookups read the kernel's maps; writes stay in the replay), on the same
// frame, on the timings' CPU. The replay's action and output frame must
// equal a real BPF_PROG_TEST_RUN of the same frame, or its count is
// refused. Map lookups, helper calls and BPF-to-BPF calls are counted
// beside the instructions: on the AMD machines each helper call and each
// hash-map lookup costs several mispredicted returns (BENCHMARKS.md).

// Count is what one replay executed, and how it ended.
type Count struct {
	Insns   int
	Calls   map[string]int // helper calls by helper, map lookups by map
	Subprog int            // BPF-to-BPF calls
	Action  uint32
	Out     []byte
	Lines   map[string]int // with Env.Lines: instructions by function and source line
}

func (c Count) String() string {
	var keys []string
	for k := range c.Calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	// Helper calls; array lookups the verifier inlines (no call) are
	// counted as lookups only.
	fmt.Fprintf(&b, "%d instructions", c.Insns)
	for _, k := range keys {
		fmt.Fprintf(&b, ", %s %d", k, c.Calls[k])
	}
	if c.Subprog > 0 {
		fmt.Fprintf(&b, ", BPF-to-BPF calls %d", c.Subprog)
	}
	return b.String()
}

// Env is what a replay needs from the bed the program is loaded in.
type Env struct {
	Maps    map[string]*ebpf.Map // the loaded program's maps by name
	CPU     int                  // per-CPU maps are read at this CPU
	Ifindex uint32               // ctx->ingress_ifindex
	Jiffies uint64               // what bpf_jiffies64 returns
	Lines   bool                 // count instructions by function and source line (Count.Lines)
}

type region struct {
	name string
	buf  []byte
	ptrs map[int64]val // pointers stored at 8-byte offsets
	m    *ebpf.Map     // for map-pointer regions (the map itself)
}

type val struct {
	r *region // nil: a scalar n; else a pointer r+int64(n)
	n uint64
}

type frame struct {
	regs  [11]val
	ret   int // instruction to return to
	stack *region
}

const (
	pktHeadroom = 256
	pktSize     = 4096
)

// Replay runs the XDP program spec on pkt arriving as env describes and
// returns what it executed, its action and its output frame. Map lookups
// read env's maps (the kernel's); map writes are not replayed, so the
// kernel's maps stay as they are. A caller that counts a path should
// check Action and Out against a real run of the same frame
// (BPF_PROG_TEST_RUN): a replay that differs does not count that path.
func Replay(spec *ebpf.ProgramSpec, env Env, pkt []byte) (Count, error) {
	insns := spec.Instructions
	raw := make([]int, len(insns)+1) // raw slot of each instruction
	byRaw := map[int]int{}
	syms := map[string]int{}
	for i, ins := range insns {
		byRaw[raw[i]] = i
		raw[i+1] = raw[i] + int(ins.Size()/asm.InstructionSize)
		if s := ins.Symbol(); s != "" {
			syms[s] = i
		}
	}
	byRaw[raw[len(insns)]] = len(insns)
	var where []string
	if env.Lines {
		where = make([]string, len(insns))
		fn, line := "", ""
		for i, ins := range insns {
			if f := btf.FuncMetadata(&insns[i]); f != nil {
				fn = f.Name
			}
			if l, ok := ins.Source().(*btf.Line); ok {
				line = fmt.Sprintf("%s:%d %s", filepath.Base(l.FileName()), l.LineNumber(), strings.TrimSpace(l.Line()))
			}
			where[i] = fn + ": " + line
		}
	}

	p := &region{name: "packet", buf: make([]byte, pktSize)}
	copy(p.buf[pktHeadroom:], pkt)
	data, dataEnd := int64(pktHeadroom), int64(pktHeadroom+len(pkt))
	ctx := &region{name: "ctx", buf: make([]byte, 24)}
	values := map[string]*region{} // map lookups: one region per map and key
	mapRegions := map[*ebpf.Map]*region{}
	mapRegion := func(m *ebpf.Map, name string) *region {
		if r, ok := mapRegions[m]; ok {
			return r
		}
		r := &region{name: "map " + name, m: m}
		mapRegions[m] = r
		return r
	}
	c := Count{Calls: map[string]int{}}
	var bss *region // .bss, made on first use
	fr := &frame{stack: &region{name: "stack", buf: make([]byte, 512)}}
	fr.regs[1] = val{r: ctx}
	fr.regs[10] = val{r: fr.stack, n: 512}
	var frames []*frame

	load := func(a val, off int16, size int) (val, error) {
		if a.r == nil {
			return val{}, fmt.Errorf("load from scalar %#x", a.n)
		}
		o := int64(a.n) + int64(off)
		if a.r == ctx {
			switch o {
			case 0, 8: // data, data_meta
				return val{r: p, n: uint64(data)}, nil
			case 4:
				return val{r: p, n: uint64(dataEnd)}, nil
			case 12:
				return val{n: uint64(env.Ifindex)}, nil
			default:
				return val{}, nil
			}
		}
		if a.r.m != nil && a.r.buf == nil && o == 0 && size == 4 {
			// A map pointer read through bpf/lib/lb.h's CO-RE struct
			// bpf_map, whose only field is max_entries (lb_table_m): the
			// instructions are replayed as compiled, before relocation.
			return val{n: uint64(a.r.m.MaxEntries())}, nil
		}
		if a.r == p && (o < data || o+int64(size) > dataEnd) {
			return val{}, fmt.Errorf("packet read at %d+%d outside [%d,%d)", o, size, data, dataEnd)
		}
		if o < 0 || o+int64(size) > int64(len(a.r.buf)) {
			return val{}, fmt.Errorf("%s read at %d+%d outside %d bytes", a.r.name, o, size, len(a.r.buf))
		}
		if size == 8 {
			if v, ok := a.r.ptrs[o]; ok {
				return v, nil
			}
		}
		b := a.r.buf[o : o+int64(size)]
		switch size {
		case 1:
			return val{n: uint64(b[0])}, nil
		case 2:
			return val{n: uint64(binary.LittleEndian.Uint16(b))}, nil
		case 4:
			return val{n: uint64(binary.LittleEndian.Uint32(b))}, nil
		}
		return val{n: binary.LittleEndian.Uint64(b)}, nil
	}
	store := func(a val, off int16, size int, v val) error {
		if a.r == nil || a.r == ctx {
			return fmt.Errorf("store to %v", a)
		}
		o := int64(a.n) + int64(off)
		if o < 0 || o+int64(size) > int64(len(a.r.buf)) || (a.r == p && (o < data || o+int64(size) > dataEnd)) {
			return fmt.Errorf("%s write at %d+%d out of bounds", a.r.name, o, size)
		}
		for k := range a.r.ptrs {
			if k < o+int64(size) && k+8 > o {
				delete(a.r.ptrs, k)
			}
		}
		if v.r != nil {
			if size != 8 {
				return fmt.Errorf("%d-byte store of a pointer", size)
			}
			if a.r.ptrs == nil {
				a.r.ptrs = map[int64]val{}
			}
			a.r.ptrs[o] = v
			return nil
		}
		b := a.r.buf[o : o+int64(size)]
		switch size {
		case 1:
			b[0] = byte(v.n)
		case 2:
			binary.LittleEndian.PutUint16(b, uint16(v.n))
		case 4:
			binary.LittleEndian.PutUint32(b, uint32(v.n))
		default:
			binary.LittleEndian.PutUint64(b, v.n)
		}
		return nil
	}
	bytesAt := func(a val, n int) ([]byte, error) {
		if a.r == nil || int64(a.n)+int64(n) > int64(len(a.r.buf)) {
			return nil, fmt.Errorf("bad key pointer")
		}
		return a.r.buf[a.n : a.n+uint64(n)], nil
	}
	helper := func(fn asm.BuiltinFunc, r []val) (val, error) {
		c.Calls["helper "+fn.String()]++
		switch fn {
		case asm.FnMapLookupElem:
			mr := r[1].r
			if mr == nil || mr.m == nil {
				return val{}, fmt.Errorf("map lookup on a non-map")
			}
			m := mr.m
			c.Calls["lookup "+mr.name[4:]+" ("+m.Type().String()+")"]++
			key, err := bytesAt(r[2], int(m.KeySize()))
			if err != nil {
				return val{}, err
			}
			id := mr.name + "/" + string(key)
			if v, ok := values[id]; ok {
				return val{r: v}, nil
			}
			raw, err := m.LookupBytes(key)
			if err != nil {
				return val{}, err
			}
			if raw == nil {
				return val{}, nil
			}
			vs := int(m.ValueSize())
			switch m.Type() {
			case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash:
				stride := (vs + 7) &^ 7
				raw = raw[env.CPU*stride : env.CPU*stride+vs]
			case ebpf.ArrayOfMaps, ebpf.HashOfMaps:
				inner, err := ebpf.NewMapFromID(ebpf.MapID(binary.LittleEndian.Uint32(raw)))
				if err != nil {
					return val{}, err
				}
				return val{r: mapRegion(inner, mr.name[4:]+"[inner]")}, nil
			}
			v := &region{name: "value of " + mr.name[4:], buf: append([]byte(nil), raw...)}
			values[id] = v
			return val{r: v}, nil
		case asm.FnMapUpdateElem, asm.FnMapDeleteElem:
			return val{}, nil // the replay leaves the kernel's maps as they are
		case asm.FnJiffies64:
			return val{n: env.Jiffies}, nil
		case asm.FnKtimeGetNs:
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			return val{n: uint64(ts.Nano())}, nil
		case asm.FnXdpAdjustHead:
			d := int64(int32(r[2].n))
			if data+d < 0 || data+d > dataEnd-14 {
				return val{n: ^uint64(21)}, nil // -EINVAL
			}
			data += d
			return val{}, nil
		case asm.FnXdpAdjustTail:
			d := int64(int32(r[2].n))
			if dataEnd+d < data+14 || dataEnd+d > pktSize {
				return val{n: ^uint64(21)}, nil
			}
			dataEnd += d
			return val{}, nil
		case asm.FnRedirect:
			return val{n: 4}, nil
		}
		return val{}, fmt.Errorf("helper %s is not replayed", fn)
	}

	pc := 0
	for steps := 0; ; steps++ {
		if steps > 1_000_000 || pc < 0 || pc >= len(insns) {
			return c, fmt.Errorf("replay left the program at %d after %d steps", pc, steps)
		}
		ins := insns[pc]
		c.Insns++
		if where != nil {
			if c.Lines == nil {
				c.Lines = map[string]int{}
			}
			c.Lines[where[pc]]++
		}
		op := ins.OpCode
		dst, src := &fr.regs[ins.Dst], fr.regs[ins.Src]
		next := pc + 1
		switch cls := op.Class(); {
		case op.IsDWordLoad():
			if ins.IsLoadFromMap() {
				m := env.Maps[ins.Reference()]
				if m == nil && ins.Src == asm.PseudoMapValue && ins.Reference() == ".bss" {
					// Zero-initialised globals (hc_address): the beds
					// never set them, so they hold zeros, as here.
					if bss == nil {
						bss = &region{name: "global data .bss", buf: make([]byte, 4096)}
					}
					*dst = val{r: bss, n: uint64(ins.Constant) >> 32}
					break
				}
				if m == nil {
					return c, fmt.Errorf("no map %q", ins.Reference())
				}
				mr := mapRegion(m, ins.Reference())
				if ins.Src == asm.PseudoMapValue {
					v, err := helper(asm.FnMapLookupElem, []val{{}, {r: mr}, {r: &region{buf: make([]byte, 4)}}})
					c.Calls["helper "+asm.FnMapLookupElem.String()]--
					c.Calls["lookup "+ins.Reference()+" ("+m.Type().String()+")"]--
					if c.Calls["lookup "+ins.Reference()+" ("+m.Type().String()+")"] == 0 {
						delete(c.Calls, "lookup "+ins.Reference()+" ("+m.Type().String()+")")
					}
					if err != nil || v.r == nil {
						return c, fmt.Errorf("global data %s: %v", ins.Reference(), err)
					}
					*dst = val{r: v.r, n: uint64(ins.Constant) >> 32}
				} else {
					*dst = val{r: mr}
				}
			} else {
				*dst = val{n: uint64(ins.Constant)}
			}
		case cls == asm.LdXClass:
			v, err := load(src, ins.Offset, int(op.Size().Sizeof()))
			if err != nil {
				return c, fmt.Errorf("insn %d (%v): %w", pc, ins, err)
			}
			*dst = v
		case cls == asm.StXClass || cls == asm.StClass:
			v := src
			if cls == asm.StClass {
				v = val{n: uint64(ins.Constant)}
			}
			if op.Mode() != asm.MemMode {
				return c, fmt.Errorf("insn %d (%v): atomic operations are not replayed", pc, ins)
			}
			if err := store(*dst, ins.Offset, int(op.Size().Sizeof()), v); err != nil {
				return c, fmt.Errorf("insn %d (%v): %w", pc, ins, err)
			}
		case cls.IsALU():
			b := val{n: uint64(ins.Constant)}
			if op.Source() == asm.RegSource {
				b = src
			}
			r, err := alu(op, cls == asm.ALU64Class, *dst, b, ins.Constant)
			if err != nil {
				return c, fmt.Errorf("insn %d (%v): %w", pc, ins, err)
			}
			*dst = r
		case cls.IsJump():
			switch jop := op.JumpOp(); jop {
			case asm.Exit:
				if len(frames) == 0 {
					c.Action = uint32(fr.regs[0].n)
					c.Out = append([]byte(nil), p.buf[data:dataEnd]...)
					return c, nil
				}
				r0 := fr.regs[0]
				caller := frames[len(frames)-1]
				frames = frames[:len(frames)-1]
				next = fr.ret
				fr = caller
				fr.regs[0] = r0
			case asm.Call:
				if ins.IsFunctionCall() {
					target, ok := syms[ins.Reference()]
					if !ok {
						return c, fmt.Errorf("call of unknown function %q", ins.Reference())
					}
					c.Subprog++
					nf := &frame{ret: pc + 1, stack: &region{name: "stack of " + ins.Reference(), buf: make([]byte, 512)}}
					nf.regs = fr.regs
					nf.regs[10] = val{r: nf.stack, n: 512}
					frames = append(frames, fr)
					fr = nf
					next = target
					break
				}
				r0, err := helper(asm.BuiltinFunc(ins.Constant), fr.regs[:6])
				if err != nil {
					return c, fmt.Errorf("insn %d: %w", pc, err)
				}
				fr.regs[0] = r0
				for i := 1; i <= 5; i++ {
					fr.regs[i] = val{}
				}
			default:
				b := val{n: uint64(ins.Constant)}
				if op.Source() == asm.RegSource {
					b = src
				}
				t, err := cond(jop, cls == asm.Jump32Class, *dst, b)
				if err != nil {
					return c, fmt.Errorf("insn %d (%v): %w", pc, ins, err)
				}
				if t {
					i, ok := byRaw[raw[pc]+1+int(ins.Offset)]
					if !ok {
						return c, fmt.Errorf("insn %d: jump into an instruction", pc)
					}
					next = i
				}
			}
		default:
			return c, fmt.Errorf("insn %d (%v): not replayed", pc, ins)
		}
		pc = next
	}
}

func alu(op asm.OpCode, is64 bool, a, b val, imm int64) (val, error) {
	aop := op.ALUOp()
	if a.r != nil || b.r != nil {
		switch {
		case aop == asm.Mov:
			return b, nil
		case aop == asm.Add && a.r != nil && b.r == nil:
			return val{r: a.r, n: a.n + b.n}, nil
		case aop == asm.Add && b.r != nil && a.r == nil:
			return val{r: b.r, n: a.n + b.n}, nil
		case aop == asm.Sub && a.r != nil && b.r == nil:
			return val{r: a.r, n: a.n - b.n}, nil
		case aop == asm.Sub && a.r != nil && a.r == b.r:
			return val{n: a.n - b.n}, nil
		}
		return val{}, fmt.Errorf("%v on a pointer", aop)
	}
	x, y := a.n, b.n
	if !is64 {
		x, y = uint64(uint32(x)), uint64(uint32(y))
	}
	var r uint64
	switch aop {
	case asm.Add:
		r = x + y
	case asm.Sub:
		r = x - y
	case asm.Mul:
		r = x * y
	case asm.Div:
		if y != 0 {
			r = x / y
		}
	case asm.Mod:
		r = x
		if y != 0 {
			r = x % y
		}
	case asm.Or:
		r = x | y
	case asm.And:
		r = x & y
	case asm.Xor:
		r = x ^ y
	case asm.LSh:
		if is64 {
			r = x << (y & 63)
		} else {
			r = x << (y & 31)
		}
	case asm.RSh:
		if is64 {
			r = x >> (y & 63)
		} else {
			r = uint64(uint32(x) >> (y & 31))
		}
	case asm.ArSh:
		if is64 {
			r = uint64(int64(x) >> (y & 63))
		} else {
			r = uint64(uint32(int32(uint32(x)) >> (y & 31)))
		}
	case asm.Neg:
		r = -x
	case asm.Mov:
		r = y
	case asm.Swap:
		r = a.n
		if op.Endianness() == asm.BE {
			switch imm {
			case 16:
				r = uint64(uint16(r)<<8 | uint16(r)>>8)
			case 32:
				v := uint32(r)
				r = uint64(v>>24 | (v>>8)&0xff00 | (v<<8)&0xff0000 | v<<24)
			case 64:
				var bb [8]byte
				binary.LittleEndian.PutUint64(bb[:], r)
				r = binary.BigEndian.Uint64(bb[:])
			}
		} else {
			switch imm {
			case 16:
				r = uint64(uint16(r))
			case 32:
				r = uint64(uint32(r))
			}
		}
		return val{n: r}, nil
	default:
		return val{}, fmt.Errorf("ALU op %v is not replayed", aop)
	}
	if !is64 {
		r = uint64(uint32(r))
	}
	return val{n: r}, nil
}

func cond(op asm.JumpOp, is32 bool, a, b val) (bool, error) {
	if op == asm.Ja {
		return true, nil
	}
	x, y := a.n, b.n
	if a.r != nil || b.r != nil {
		switch {
		case a.r != nil && a.r == b.r: // same region: offsets
		case b.r == nil && b.n == 0 && (op == asm.JEq || op == asm.JNE):
			return op == asm.JNE, nil // a pointer is never NULL
		default:
			return false, fmt.Errorf("comparison %v of unrelated pointers", op)
		}
	}
	if is32 {
		x, y = uint64(uint32(x)), uint64(uint32(y))
	}
	sx, sy := int64(x), int64(y)
	if is32 {
		sx, sy = int64(int32(uint32(x))), int64(int32(uint32(y)))
	}
	switch op {
	case asm.JEq:
		return x == y, nil
	case asm.JNE:
		return x != y, nil
	case asm.JGT:
		return x > y, nil
	case asm.JGE:
		return x >= y, nil
	case asm.JLT:
		return x < y, nil
	case asm.JLE:
		return x <= y, nil
	case asm.JSGT:
		return sx > sy, nil
	case asm.JSGE:
		return sx >= sy, nil
	case asm.JSLT:
		return sx < sy, nil
	case asm.JSLE:
		return sx <= sy, nil
	case asm.JSet:
		return x&y != 0, nil
	case asm.Ja:
		return true, nil
	}
	return false, fmt.Errorf("jump %v is not replayed", op)
}
