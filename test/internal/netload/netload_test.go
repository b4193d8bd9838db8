package netload

import (
	"net/netip"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRRAndCRR: on the loopback (no root), RR's transactions come back
// byte for byte with ordered percentiles, CRR opens connections, and a
// closed server refuses the next client.
func TestRRAndCRR(t *testing.T) {
	s, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.Port())
	rr, err := RR(to, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Transactions == 0 || rr.P50 <= 0 || rr.P50 > rr.P99 || rr.Rate() <= 0 {
		t.Errorf("RR: %+v (rate %.0f/s)", rr, rr.Rate())
	}
	crr, err := CRR(to, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if crr.Connections == 0 || crr.Rate() <= 0 {
		t.Errorf("CRR: %+v", crr)
	}
	s.Close()
	if _, err := CRR(to, 50*time.Millisecond); err == nil {
		t.Error("CRR to a closed server: no error")
	}
}

func TestPercentile(t *testing.T) {
	v := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

// TestIPerf3 runs both modes on the loopback when iperf3 is installed.
func TestIPerf3(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("no iperf3 (apt-get install iperf3)")
	}
	// a port of the loopback nothing holds, not iperf3's usual one
	s, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := IPerf3{Server: netip.MustParseAddr("127.0.0.1"), Port: s.Port(), Secs: 1}
	if g, err := p.TCP(2); err != nil || g <= 0 {
		t.Errorf("TCP: %v Gbit/s, %v", g, err)
	}
	if pps, err := p.UDP(64); err != nil || pps <= 0 {
		t.Errorf("UDP: %v packets/s, %v", pps, err)
	}
}

// TestPinThread: the thread runs on the CPU asked, and on what it had
// afterwards.
func TestPinThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was, now unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	restore, err := PinThread(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedGetaffinity(0, &now); err != nil {
		t.Fatal(err)
	}
	if now.Count() != 1 || !now.IsSet(0) {
		t.Errorf("pinned to CPU 0: the thread may run on %d CPUs", now.Count())
	}
	restore()
	if err := unix.SchedGetaffinity(0, &now); err != nil {
		t.Fatal(err)
	}
	if now != was {
		t.Error("restore did not give the thread its CPUs back")
	}
}
