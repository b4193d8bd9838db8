// Package benchnode is what the overlay, scale and policy benches share to
// stand up simulated nodes: a node's network namespace wired to an underlay
// bridge (NewNS), a daemon run in it with its log (Start), the peer routes
// its kernel reports (WatchPeerRoutes) and the daemon's memory and CPU as
// /proc tells them (ReadMem, StatCPU, ThreadCPU).
package benchnode

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/netops"
)

// NS is a node's named network namespace and a handle into it.
type NS struct {
	Name string         // the name under /run/netns
	Path string         // its path
	H    *netops.Handle // bound to it
}

// Wire says how NewNS wires a namespace to the underlay: a veth HostVeth
// on the host side (Host's namespace), enslaved to Bridge, whose peer is
// eth0 in the node with Addr.
type Wire struct {
	Host     *netops.Handle
	HostVeth string
	Bridge   string
	Addr     netip.Prefix
}

// NewNS creates the named namespace, sets its loopback up and wires it as
// w says. Once the namespace exists it is returned even with an error, so
// that the caller's Close removes it.
func NewNS(name string, w Wire) (*NS, error) {
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	n := &NS{Name: name, Path: path}
	if n.H, err = netops.Open(path); err != nil {
		return n, err
	}
	if err := n.H.SetLinkUp("lo"); err != nil {
		return n, err
	}
	if _, _, err := w.Host.EnsureVeth(netops.VethOpts{HostName: w.HostVeth, PeerName: "eth0", Peer: n.H, Master: w.Bridge}); err != nil {
		return n, err
	}
	if err := n.H.EnsureAddr("eth0", w.Addr, netops.AddrOpts{NoDAD: true}); err != nil {
		return n, err
	}
	return n, nil
}

// Close closes the handle and deletes the namespace (its end of the veth
// goes with it).
func (n *NS) Close() {
	if n == nil {
		return
	}
	if n.H != nil {
		n.H.Close()
	}
	netops.DeleteNamedNS(n.Name)
}
