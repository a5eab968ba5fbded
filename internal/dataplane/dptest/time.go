package dptest

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// progTestRun is the BPF_PROG_TEST_RUN part of union bpf_attr.
type progTestRun struct {
	ProgFD, Retval, DataSizeIn, DataSizeOut uint32
	DataIn, DataOut                         uint64
	Repeat, Duration, CtxSizeIn, CtxSizeOut uint32
	CtxIn, CtxOut                           uint64
	Flags, CPU, BatchSize                   uint32
	_                                       uint32
}

const bpfProgTestRun = 10

// Time runs prog repeat times on data as if it arrived on dev
// (BPF_PROG_TEST_RUN repeat mode with an xdp_md context naming dev, which
// cilium/ebpf's Benchmark cannot pass) and returns the kernel's mean time
// per run in ns and the program's last action. The kernel excludes the
// time the loop was preempted. The thread is pinned to the first CPU the
// process may use (as Run does).
func (e *Env) Time(prog *ebpf.Program, dev string, data []byte, repeat uint32) (float64, uint32, error) {
	idx, err := e.Node.Ifindex(dev)
	if err != nil {
		return 0, 0, err
	}
	var ns float64
	var ret uint32
	err = e.Node.Do(func() error {
		// On the CPU Run uses: per-CPU state carries between fixtures,
		// runs and timings, and a per-CPU run counter never restarts
		// on another CPU halfway through a measurement.
		restore, err := pinFirstCPU()
		if err != nil {
			return err
		}
		defer restore()
		in := append([]byte(nil), data...)
		out := make([]byte, len(data)+512)
		ctx := xdpMd{DataEnd: uint32(len(data)), IngressIfindex: uint32(idx)}
		attr := progTestRun{
			ProgFD: uint32(prog.FD()), DataSizeIn: uint32(len(in)), DataSizeOut: uint32(len(out)),
			DataIn: uint64(uintptr(unsafe.Pointer(&in[0]))), DataOut: uint64(uintptr(unsafe.Pointer(&out[0]))),
			Repeat: repeat, CtxSizeIn: uint32(unsafe.Sizeof(ctx)), CtxIn: uint64(uintptr(unsafe.Pointer(&ctx))),
		}
		for try := 0; ; try++ {
			_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			runtime.KeepAlive(in)
			runtime.KeepAlive(out)
			runtime.KeepAlive(&ctx)
			if errno == 0 {
				break
			}
			// A signal (the Go runtime's preemption) interrupts long
			// runs: run again, up to a bound.
			if errors.Is(errno, unix.EINTR) && try < 100 {
				continue
			}
			return fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
		ns, ret = float64(attr.Duration), attr.Retval
		return nil
	})
	return ns, ret, err
}
