package lower

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
	"github.com/containernetworking/cni/pkg/types"
)

// Spec describes one kind of device.
type Spec struct {
	// Kind is the link kind and the plugin type ("macvlan", "ipvlan").
	Kind string
	// Modes are the accepted values of "mode"; the first is the default.
	Modes []string
	// MAC says whether the device has its own MAC ("mac", the mac
	// capability, args.cni.mac, CNI_ARGS MAC=) and a broadcast queue
	// ("bcqueuelen").
	MAC bool
	// Notify says whether the pod end announces its addresses when it comes
	// up (arp_notify, ndisc_notify), as the reference macvlan does.
	Notify bool
	// Chained says that the role may follow another in a chain, as the
	// reference ipvlan does: without "master" the master is the single
	// interface of prevResult, and without IPAM the addresses and routes
	// are prevResult's.
	Chained bool
	// Create makes the device (netops.Handle.EnsureMacvlan or EnsureIpvlan)
	// on master's handle.
	Create func(master *netops.Handle, o netops.SubLinkOpts) (netops.SubLink, error)
	// Record adds the kind's own facts to the endpoint record after the
	// master, mode and MAC (optional; the vlan role records its VLAN ID).
	Record func(*store.Endpoint)
}

// Role returns the CNI role of s.
func (s *Spec) Role(about string) *cniplug.Role {
	return s.role(about, s.parseConf, s.add, s.check)
}

// role is the CNI role of s with add and check, which get the config from
// parse; DEL, GC and STATUS are every kind's.
func (s *Spec) role(about string, parse func(*cniplug.Args) (*Conf, error), add func(context.Context, *cniplug.Args, *Conf) (types.Result, error), check func(context.Context, *cniplug.Args, *Conf) error) *cniplug.Role {
	return &cniplug.Role{
		Name:   s.Kind,
		About:  about,
		Add:    cniplug.AddWithConf(parse, add),
		Check:  cniplug.WithConf(parse, check),
		Del:    cniplug.WithConf(s.parseConf, s.del),
		GC:     cniplug.WithConf(s.parseConf, s.gc),
		Status: attach.Status,
	}
}
