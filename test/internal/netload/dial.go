package netload

import (
	"net"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// DialFrom makes a TCP connection to `to` from the network namespace at
// ns (a path), within timeout.
func DialFrom(ns string, to netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netops.InNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", to.String(), timeout)
		return err
	})
	return c, err
}
