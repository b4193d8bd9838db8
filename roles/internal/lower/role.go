package lower

import (
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

// MacvlanVerbs and IpvlanVerbs are the verbs of the macvlan and ipvlan
// roles: ADD and CHECK those of a device on a master, DEL and GC every
// kind's, STATUS attach.Status. A role that makes its device its own way
// (vlan, tap, dummy) names Del and GC with its own ADD and CHECK.
var (
	MacvlanVerbs = cniplug.ConfVerbs[*Conf]{Parse: parseMacvlan, Add: Add, Check: Check, Del: Del, GC: GC,
		ParseStatus: cniplug.Unparsed[*Conf], Status: attach.Status[*Conf]}
	IpvlanVerbs = cniplug.ConfVerbs[*Conf]{Parse: parseIpvlan, Add: Add, Check: Check, Del: Del, GC: GC,
		ParseStatus: cniplug.Unparsed[*Conf], Status: attach.Status[*Conf]}
)

func parseMacvlan(a *cniplug.Args) (*Conf, error) { return Macvlan.parseConf(a) }
func parseIpvlan(a *cniplug.Args) (*Conf, error)  { return Ipvlan.parseConf(a) }
