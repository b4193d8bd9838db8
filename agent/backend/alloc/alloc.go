// Package alloc is flannel's alloc backend: the node leases its subnet and
// publishes its public IP, and that is all. There is no data path: another
// system (a cloud's routes, BGP) carries the pods' traffic, and the lease
// only hands out subnets. As flannel's, it publishes no backend type, and
// programs nothing for its peers.
package alloc

import (
	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
)

// Backend is the alloc backend; it has no device.
type Backend struct{ backend.Deviceless }

// New returns the alloc backend.
func New(env backend.Env) *Backend { return &Backend{backend.Deviceless{Env: env}} }

// Type is "" (flannel's alloc leases carry no BackendType).
func (b *Backend) Type() string { return lease.BackendAlloc }

// Publish publishes no type and no data.
func (b *Backend) Publish(a *lease.Attrs) { a.BackendType = lease.BackendAlloc }

// Accepts nothing: alloc programs no peer.
func (b *Backend) Accepts(lease.Lease) bool { return false }

// Add does nothing.
func (b *Backend) Add(*netops.Handle, lease.Lease, *lease.Lease) error { return nil }

// Remove does nothing.
func (b *Backend) Remove(*netops.Handle, lease.Lease) error { return nil }

// Sync does nothing.
func (b *Backend) Sync(*netops.Handle, []lease.Lease) (int, int, error) { return 0, 0, nil }
