package dataplane

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Bench holds the measuring programs of bpf/bench.c.
type Bench struct {
	objs benchObjects
}

// LoadBench loads the floor, sink and generator programs.
func LoadBench() (*Bench, error) {
	spec, err := loadBench()
	if err != nil {
		return nil, err
	}
	b := &Bench{}
	if err := spec.LoadAndAssign(&b.objs, nil); err != nil {
		return nil, loadErr("bench", err)
	}
	return b, nil
}

func (b *Bench) Close() error { return b.objs.Close() }

// Floor swaps MACs and returns XDP_TX: the reference cost.
func (b *Bench) Floor() *ebpf.Program { return b.objs.XdpFloor }

// Sink counts and drops.
func (b *Bench) Sink() *ebpf.Program { return b.objs.XdpSink }

// Pass returns XDP_PASS.
func (b *Bench) Pass() *ebpf.Program { return b.objs.XdpPass }

// Gen is the live-frames traffic generator.
func (b *Bench) Gen() *ebpf.Program { return b.objs.XdpGen }

// SinkCount reads the sink's packet count summed over CPUs.
func (b *Bench) SinkCount() (Count, error) {
	var vals []benchStatEntry
	if err := b.objs.SinkCount.Lookup(uint32(0), &vals); err != nil {
		return Count{}, err
	}
	var c Count
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c, nil
}

// SetGen writes the generator template: every frame gets tmpl (at most 64
// bytes, UDP checksum zero) and a source port cycling over flows from
// sportBase.
func (b *Bench) SetGen(tmpl []byte, flows uint32, sportBase uint16) error {
	if len(tmpl) > 64 {
		return fmt.Errorf("generator template is %d bytes, at most 64", len(tmpl))
	}
	var c benchGenConfig
	copy(c.Tmpl[:], tmpl)
	c.TmplLen = uint32(len(tmpl))
	c.Flows = flows
	c.SportBase = sportBase
	return b.objs.GenCfg.Update(uint32(0), &c, ebpf.UpdateAny)
}

// FlowHash runs flow_hash4 in the kernel (for tests of internal/flowhash).
func (b *Bench) FlowHash() *ebpf.Program { return b.objs.XdpFlowhash }

// SetHashSeed sets the seed xdp_flowhash uses.
func (b *Bench) SetHashSeed(seed uint32) error {
	return b.objs.HashSeed.Update(uint32(0), seed, ebpf.UpdateAny)
}
