package dataplane

import (
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
)

type netipAddr = netip.Addr

type ebpfProgram = ebpf.Program

type edgeProg struct{ e *Edge }

func (p edgeProg) prog() *ebpf.Program { return p.e.Program() }

func netipIP(s string) net.IP { return net.ParseIP(s) }

// layersPayload serializes raw bytes as a layer (gopacket.Payload without
// its decoding role).
type layersPayload struct{ b []byte }

func (p *layersPayload) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	buf, err := b.PrependBytes(len(p.b))
	if err != nil {
		return err
	}
	copy(buf, p.b)
	return nil
}

func (p *layersPayload) LayerType() gopacket.LayerType { return gopacket.LayerTypePayload }
