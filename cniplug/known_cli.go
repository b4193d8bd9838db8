package cniplug

import (
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/cnibox/cnibox/store"
)

// What a role adds to the CLI (`cnibox inspect`, doctor's node checks,
// `cnibox install`), declared in Known so that cli names no role.

// InspectCommand is a `cnibox inspect NAME` that lists what a role keeps
// in the store (the dhcp daemon's leases). It takes --data-dir and --json,
// and --network with Network.
type InspectCommand struct {
	Name, Usage, UsageText string
	// Network says the command takes --network: only that network.
	Network bool
	// List reads what the command shows from st (nil: no store yet) for
	// network ("" = every network); --json prints it as it is, so an
	// empty list is an empty slice, not nil.
	List func(st *store.Store, network string) (any, error)
	// Print prints what List returned as a table.
	Print func(w io.Writer, v any) error
}

// NodeCheck is what a role's DoctorNode hook checks: the node's side of
// the role, beside the endpoints (a daemon's leases).
type NodeCheck struct {
	Reporter
	// Store is the node's store, open while the hooks run (nil: none).
	Store *store.Store
}

// KeptPool is an address pool an IPAM role keeps beside a network's
// reservations (store.IPAMTx.PutKept), for `cnibox inspect ipam`.
type KeptPool struct {
	// Range names the pool for a person ("nic 000d3a51c490 (eth0)").
	Range  string
	Subnet netip.Prefix
	// Source says where it comes from ("cloud azure http://...").
	Source string
	// Refreshed is when its source last answered; LastError why it did
	// not, the last time it was asked.
	Refreshed time.Time
	LastError string
	// Addrs are the addresses pods may get from it.
	Addrs []netip.Addr
}

// KeptPools returns the pools the roles find in what they keep beside a
// network's reservations (store.IPAMView.Kept).
func (r *Registry) KeptPools(kept map[string][]byte) []KeptPool {
	if len(kept) == 0 {
		return nil
	}
	var out []KeptPool
	for _, k := range r.Known() {
		if k.KeptPools != nil {
			out = append(out, k.KeptPools(kept)...)
		}
	}
	return out
}

// InspectCommands returns every role's inspect commands, in the roles'
// order.
func (r *Registry) InspectCommands() []InspectCommand {
	var out []InspectCommand
	for _, k := range r.Known() {
		out = append(out, k.Inspect...)
	}
	return out
}

// DoctorNode runs every role's DoctorNode hook on c.
func (r *Registry) DoctorNode(c *NodeCheck) {
	for _, k := range r.Known() {
		if k.DoctorNode != nil {
			k.DoctorNode(c)
		}
	}
}

// Companions returns the roles' companion binaries (Known.Companions),
// each once.
func (r *Registry) Companions() []string {
	var out []string
	for _, k := range r.Known() {
		for _, c := range k.Companions {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// Wrapper returns the role that wraps a whole conflist for `cnibox install
// --secondary-networks` (Known.WrapConflist), or "" and nil.
func (r *Registry) Wrapper() (name string, wrap func([]byte) ([]byte, error)) {
	for _, k := range r.Known() {
		if k.WrapConflist != nil {
			return k.Role, k.WrapConflist
		}
	}
	return "", nil
}

// AgentSocket returns the socket of cnibox-agent that the ADD of an IPAM
// role named typ asks (Known.AgentSocket) for its config conf (the
// plugin's JSON); ok is false for an IPAM that asks no agent.
func (r *Registry) AgentSocket(typ string, conf []byte) (socket string, ok bool) {
	if k := r.KnownOf(typ); k != nil && k.AgentSocket != nil {
		return k.AgentSocket(conf)
	}
	return "", false
}
