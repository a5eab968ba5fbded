package monitor

import (
	"bufio"
	"encoding/binary"
	"io"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// PcapWriter writes events as pcapng (Ethernet, a snap length of
// dataplane.MonitorSnap): one interface block per ingress interface, one
// enhanced packet block per event with its verdict as the packet's
// comment (Comment). pcapng, not pcap: pcap has no place for the verdict.
// tshark shows the comment as frame.comment (pkt_comment before 3.6).
type PcapWriter struct {
	w     *bufio.Writer
	ifs   map[uint32]uint32 // ifindex -> interface id
	boot  time.Time         // wall time of CLOCK_MONOTONIC 0
	nifs  uint32
	names func(uint32) string
}

// NewPcapWriter writes the section header; names names an ifindex (for
// the interface blocks), boot is the wall time CLOCK_MONOTONIC counts
// from (event times are monotonic).
func NewPcapWriter(w io.Writer, boot time.Time, names func(uint32) string) (*PcapWriter, error) {
	p := &PcapWriter{w: bufio.NewWriter(w), ifs: map[uint32]uint32{}, boot: boot, names: names}
	// Section header: byte-order magic, version 1.0, section length unknown.
	body := make([]byte, 16)
	binary.LittleEndian.PutUint32(body[0:], 0x1A2B3C4D)
	binary.LittleEndian.PutUint16(body[4:], 1)
	binary.LittleEndian.PutUint16(body[6:], 0)
	binary.LittleEndian.PutUint64(body[8:], ^uint64(0))
	body = append(body, option(4, "azgate capture")...) // shb_userappl
	body = append(body, 0, 0, 0, 0)                     // opt_endofopt
	return p, p.block(0x0A0D0D0A, body)
}

func pad4(n int) int { return (4 - n%4) % 4 }

func option(code uint16, v string) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.LittleEndian.PutUint16(b[0:], code)
	binary.LittleEndian.PutUint16(b[2:], uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, pad4(len(v)))...)
}

func (p *PcapWriter) block(typ uint32, body []byte) error {
	n := uint32(12 + len(body))
	var h [8]byte
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint32(h[4:], n)
	if _, err := p.w.Write(h[:]); err != nil {
		return err
	}
	if _, err := p.w.Write(body); err != nil {
		return err
	}
	var t [4]byte
	binary.LittleEndian.PutUint32(t[:], n)
	_, err := p.w.Write(t[:])
	return err
}

func (p *PcapWriter) iface(ifindex uint32) (uint32, error) {
	if id, ok := p.ifs[ifindex]; ok {
		return id, nil
	}
	body := make([]byte, 8)
	binary.LittleEndian.PutUint16(body[0:], 1) // LINKTYPE_ETHERNET
	binary.LittleEndian.PutUint32(body[4:], dataplane.MonitorSnap)
	body = append(body, option(2, p.names(ifindex))...) // if_name
	body = append(body, option(9, "\x09")...)           // if_tsresol: 10^-9
	body = append(body, 0, 0, 0, 0)
	if err := p.block(1, body); err != nil {
		return 0, err
	}
	id := p.nifs
	p.ifs[ifindex] = id
	p.nifs++
	return id, nil
}

// Write writes one event.
func (p *PcapWriter) Write(ev *dataplane.MonitorEvent) error {
	id, err := p.iface(ev.Ifindex)
	if err != nil {
		return err
	}
	ts := uint64(p.boot.Add(ev.Time).UnixNano())
	body := make([]byte, 20, 20+len(ev.Data)+64)
	binary.LittleEndian.PutUint32(body[0:], id)
	binary.LittleEndian.PutUint32(body[4:], uint32(ts>>32))
	binary.LittleEndian.PutUint32(body[8:], uint32(ts))
	binary.LittleEndian.PutUint32(body[12:], uint32(len(ev.Data)))
	binary.LittleEndian.PutUint32(body[16:], max(ev.Len, uint32(len(ev.Data))))
	body = append(body, ev.Data...)
	body = append(body, make([]byte, pad4(len(ev.Data)))...)
	body = append(body, option(1, Comment(ev))...) // opt_comment
	body = append(body, 0, 0, 0, 0)
	return p.block(6, body)
}

// Flush writes what is buffered.
func (p *PcapWriter) Flush() error { return p.w.Flush() }
