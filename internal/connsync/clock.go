package connsync

import (
	"sync"
	"time"
)

// JiffyClock is the kernel's jiffies as the data plane reads them
// (bpf_jiffies64), extrapolated from a reading taken at most every
// Recalibrate: a reading costs a BPF_PROG_TEST_RUN, and jiffies advance
// with the monotonic clock HZ times a second.
type JiffyClock struct {
	read func() (uint64, error)
	hz   uint32

	mu sync.Mutex
	j0 uint64
	t0 time.Time
}

// Recalibrate bounds how long the clock extrapolates from one reading.
const Recalibrate = 5 * time.Second

// NewJiffyClock reads the jiffies once through read (dataplane.Bench.Jiffies).
func NewJiffyClock(read func() (uint64, error), hz uint32) (*JiffyClock, error) {
	j, err := read()
	if err != nil {
		return nil, err
	}
	return &JiffyClock{read: read, hz: hz, j0: j, t0: time.Now()}, nil
}

func (c *JiffyClock) HZ() uint32 { return c.hz }

// Jiffies returns the current jiffies (within a jiffy).
func (c *JiffyClock) Jiffies() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.t0) > Recalibrate {
		if j, err := c.read(); err == nil {
			c.j0, c.t0 = j, time.Now()
		}
	}
	return c.j0 + uint64(time.Since(c.t0).Seconds()*float64(c.hz))
}
