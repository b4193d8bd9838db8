package lower

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
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

// Run answers the call's verb as s's role (a cniplug.Verbs, which a Role
// names as &spec: a Role is data, see cniplug.Role): Add and Check are those
// of a device on a master (a masterless kind uses AddBare and CheckBare, see
// Own), Del and GC every kind's, STATUS attach.Status.
func (s *Spec) Run(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	if a.Command == "ADD" {
		return s.Add(ctx, a)
	}
	return nil, cniplug.Pick(a.Command, s.Check, s.Del, s.GC, attach.Status)(ctx, a)
}

// Own are the verbs (a cniplug.Verbs) of a role that makes and checks its
// device its own way (vlan, tap, dummy): ADD and CHECK are its own, on the
// config C that Parse gives; DEL, GC and STATUS are Spec's (see Spec.Run).
type Own[C any] struct {
	Spec  *Spec
	Parse func(*cniplug.Args) (C, error)
	Add   func(context.Context, *cniplug.Args, C) (types.Result, error)
	Check func(context.Context, *cniplug.Args, C) error
}

// Run answers the call's verb with o's function for it, else o.Spec's.
func (o *Own[C]) Run(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	if a.Command == "ADD" || a.Command == "CHECK" {
		own := cniplug.ConfVerbs[C]{Parse: o.Parse, Add: o.Add, Check: o.Check}
		return own.Run(ctx, a)
	}
	return o.Spec.Run(ctx, a)
}

// Add is the ADD of a device on a master (see Run).
func (s *Spec) Add(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return cniplug.AddWithConf(ctx, a, s.parseConf, s.add)
}

// Check is the CHECK of s's role; see Add.
func (s *Spec) Check(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, s.parseConf, s.check)
}

// Del is the DEL of every kind: the addresses and the record go, then the
// pod's device when it is of s's kind.
func (s *Spec) Del(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, s.parseConf, s.del)
}

// GC is the GC of every kind: the devices of s's kind and the records of
// the network's stale attachments go, then IPAM's GC runs.
func (s *Spec) GC(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, s.parseConf, s.gc)
}
