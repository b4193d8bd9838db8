// Package backend is what every overlay backend of cnibox-agent implements,
// as flannel's pkg/backend is for flanneld: the agent leases the subnet,
// watches the other nodes' leases and hands each one to its backend, which
// owns the kernel state of the data path (devices, routes, neighbours,
// WireGuard peers). One package per backend lives under it (vxlan, hostgw,
// wireguard, ipip, alloc).
//
// A backend's kernel state is its own to keep exact: Sync removes whatever
// it finds that belongs to no current peer and adds what is missing, so a
// restart, a device deleted by hand or a missed event converge on the next
// sync.
package backend

import (
	"errors"
	"log/slog"
	"net/netip"

	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/netops"
)

// Underlay is the node's interface toward the other nodes.
type Underlay struct {
	Iface string
	MTU   int
	// Addr4/Addr6: the interface's addresses with their prefix (who is on
	// the same L2 network).
	Addr4 netip.Prefix
	Addr6 netip.Prefix
	// Public4/Public6: the addresses published in the lease.
	Public4 netip.Addr
	Public6 netip.Addr
}

// Env is what a backend is made with.
type Env struct {
	Config *netconf.Config
	Under  Underlay
	Log    *slog.Logger
	// TxChecksumOff turns tx checksum offload off on the VXLAN devices
	// (vxlan only).
	TxChecksumOff bool
}

// Backend is one overlay backend. The agent calls it from one goroutine.
type Backend interface {
	// Type is the backend type published in the lease (flannel's name;
	// alloc publishes none).
	Type() string
	// Devices are the links the backend owns (none for host-gw and
	// alloc); the agent repairs them when they go away.
	Devices() []string
	// Prepare creates the devices, or checks the ones there, before the
	// lease is taken: what they hold (a VTEP MAC, a public key) is
	// published with it.
	Prepare(h *netops.Handle) error
	// Publish fills in the backend's part of this node's lease
	// attributes: BackendType and the backend data of each family.
	Publish(a *lease.Attrs)
	// SetLease configures the devices for this node's lease (their
	// addresses, the routes into the cluster network).
	SetLease(h *netops.Handle, own lease.Lease) error
	// MTU is the pods' MTU (subnet.env's FLANNEL_MTU).
	MTU() int
	// Accepts reports whether l is a peer this backend programs: flannel
	// ignores leases of another backend type.
	Accepts(l lease.Lease) bool
	// Add programs a peer; prev is what it was before, if anything.
	Add(h *netops.Handle, l lease.Lease, prev *lease.Lease) error
	// Remove deletes a peer's kernel state.
	Remove(h *netops.Handle, l lease.Lease) error
	// Sync makes the kernel match peers exactly; it returns how many
	// entries it removed and added.
	Sync(h *netops.Handle, peers []lease.Lease) (removed, added int, err error)
}

// Resumer is a backend whose devices carry an identity its peers know it
// by (vxlan: the VTEP MACs), kept across restarts: before the first
// Prepare the agent hands it what this node published before, most
// trusted first (its lease, then the store's copy).
type Resumer interface {
	Resume(prev ...lease.Attrs)
}

// DirectRouter is a backend that reaches some peers by a plain route via
// their public IP on the underlay (host-gw: every peer; vxlan with
// DirectRouting: the peers on the node's L2 network); the store records
// which, for the CLI's checks.
type DirectRouter interface {
	// Direct reports whether l's IPv4 subnet is reached that way.
	Direct(l lease.Lease) bool
}

// Unreachable is a backend that can find peers it cannot reach (host-gw:
// a peer off the node's L2 network); the agent exports the count.
type Unreachable interface {
	Unreachable() int
}

// ErrUnusable is wrapped by the errors of a backend that cannot run on
// this node as configured (host-gw behind NAT, no kernel module).
var ErrUnusable = errors.New("the backend cannot run on this node")

// Deviceless is the part of a backend that has no device of its own
// (host-gw, alloc): nothing to create or address, and the pods' MTU is the
// interface's. Such a backend embeds it.
type Deviceless struct{ Env Env }

// Devices: none.
func (Deviceless) Devices() []string { return nil }

// Prepare does nothing: there is no device.
func (Deviceless) Prepare(*netops.Handle) error { return nil }

// SetLease does nothing: the subnet needs no address of the backend.
func (Deviceless) SetLease(*netops.Handle, lease.Lease) error { return nil }

// MTU is the interface's: nothing is added to a packet.
func (d Deviceless) MTU() int { return d.Env.Under.MTU }
