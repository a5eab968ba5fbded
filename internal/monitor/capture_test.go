package monitor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/dataplane"
)

// udpFrame is an Ethernet + IPv4 + UDP frame from src to dst.
func udpFrame(src, dst string, sport, dport uint16) []byte {
	f := make([]byte, 14+20+8+16)
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 1})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], dport)
	binary.BigEndian.PutUint16(ip[24:], uint16(len(ip)-20))
	return f
}

// TestCaptureTshark runs frames through a loaded edge program
// (BPF_PROG_TEST_RUN) with the monitor tracing, writes its events with
// PcapWriter and reads the file back with tshark: each frame's input and
// verdict, with the verdict as the packet comment.
func TestCaptureTshark(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: loading BPF programs needs root")
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("skipped: no tshark (apt-get install tshark; scripts/setup.sh installs it)")
	}
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := e.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := e.SetMonitor(dataplane.MonitorConfig{Trace: true, Rate: 1000}); err != nil {
		t.Fatal(err)
	}
	good := udpFrame("203.0.113.10", "198.51.100.99", 5353, 53) // not an EIP: passed
	bad := append([]byte(nil), good...)
	bad[14+10] ^= 0xff // bad header checksum: dropped
	for _, f := range []struct {
		in   []byte
		want uint32
	}{{good, 2}, {bad, 1}} {
		ret, err := e.Program().Run(&ebpf.RunOptions{Data: f.in})
		if err != nil {
			t.Fatal(err)
		}
		if ret != f.want {
			t.Fatalf("action %d, want %d", ret, f.want)
		}
	}

	file := filepath.Join(t.TempDir(), "capture.pcapng")
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewPcapWriter(out, time.Now(), func(i uint32) string { return "if" + string(rune('0'+i%10)) })
	if err != nil {
		t.Fatal(err)
	}
	var evs []dataplane.MonitorEvent
	for {
		r.SetDeadline(time.Now().Add(100 * time.Millisecond))
		var ev dataplane.MonitorEvent
		err := r.Read(&ev)
		if errors.Is(err, dataplane.ErrNoEvent) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if err := w.Write(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4 (in and pass, in and drop)", len(evs))
	}

	cmd := exec.Command(tshark, "-r", file, "-T", "fields", "-E", "separator=|", "-e", "frame.comment", "-e", "ip.src", "-e", "ip.dst", "-e", "udp.dstport", "-e", "ip.checksum")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	t.Logf("tshark:\n%s", got)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	want := []string{
		"in cpu %d seq %d|203.0.113.10|198.51.100.99|53|",
		"pass pass_not_ours cpu %d seq %d|203.0.113.10|198.51.100.99|53|",
		"in cpu %d seq %d|203.0.113.10|198.51.100.99|53|",
		"drop drop_ip_csum cpu %d seq %d|203.0.113.10|198.51.100.99|53|",
	}
	if len(lines) != len(want) {
		t.Fatalf("tshark read %d packets, want %d", len(lines), len(want))
	}
	for i, l := range lines {
		w := strings.Replace(strings.Replace(want[i], "%d", itoa(evs[i].CPU), 1), "%d", itoa(uint32(evs[i].Seq)), 1)
		if !strings.HasPrefix(l, w) {
			t.Errorf("packet %d: %q, want it to start %q", i, l, w)
		}
	}
	if evs[0].Seq != evs[1].Seq || evs[2].Seq != evs[3].Seq || evs[0].CPU == evs[2].CPU && evs[0].Seq == evs[2].Seq {
		t.Errorf("sequence numbers %d %d %d %d: want each frame's two events paired", evs[0].Seq, evs[1].Seq, evs[2].Seq, evs[3].Seq)
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
