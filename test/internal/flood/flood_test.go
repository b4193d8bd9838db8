package flood

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/internal/snmp"
)

// TestSYNs: every SYN counted as sent is a connection the namespace's
// kernel opened (Tcp ActiveOpens), at about the rate asked.
func TestSYNs(t *testing.T) {
	ns := nstest.NewNS(t, "fld")
	var sent int
	var opens int64
	err := netops.InNetns(ns, func() error {
		var err error
		// A refused port on the loopback: each SYN is answered with a
		// reset, which a closed socket ignores.
		if sent, _, err = SYNs(netip.MustParseAddrPort("127.0.0.1:9"), 2000, time.Second); err != nil {
			return err
		}
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		opens, err = snmp.Value(string(b), "Tcp", "ActiveOpens")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(sent) != opens {
		t.Errorf("sent %d SYNs, the kernel opened %d connections", sent, opens)
	}
	if sent < 1000 || sent > 2000 {
		t.Errorf("sent %d SYNs in a second at 2,000 a second", sent)
	}
}

// TestSYNsToAnOpenPort: a flood of a listening port on the loopback, whose
// answers come back within connect, runs out of no ports: more SYNs than
// the ephemeral range holds, all sent.
func TestSYNsToAnOpenPort(t *testing.T) {
	ns := nstest.NewNS(t, "fldo")
	err := netops.InNetns(ns, func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("40000 40999"), 0o644); err != nil {
			return err
		}
		sent, _, err := SYNs(netip.MustParseAddrPort(ln.Addr().String()), 3000, time.Second)
		if err == nil && sent < 2000 {
			err = fmt.Errorf("sent %d SYNs in a second at 3,000 a second", sent)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
