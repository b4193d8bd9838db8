package lower

import (
	"context"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// The parts of lower that roles which make the pod's device their own way
// take, each a thin door to the code macvlan, ipvlan and dummy run: tap
// (its device has options lower's Create cannot carry, and a role name that
// is not its kernel kind "tun") and host-device (which moves a device of the
// node instead of creating one, and so undoes and deletes differently).

// ParseConf decodes and validates lower's fields of stdin (see Conf).
func (s *Spec) ParseConf(a *cniplug.Args) (*Conf, error) { return s.parseConf(a) }

// RequestedMAC is the MAC the config asks for, by whichever source wins
// ("mac", CNI_ARGS MAC=, args.cni.mac, runtimeConfig.mac), or nil. Only a
// Spec with MAC reads one.
func (c *Conf) RequestedMAC() net.HardwareAddr { return c.mac }

// AttachBare is the ADD of a masterless kind once the config is parsed and
// the pod's namespace open, with the device made by create (in the pod,
// down, under CNI_IFNAME) and the role's facts added to the endpoint record
// by record (optional): the record and addresses first, then the device and
// the plan on it; a failure deletes the device and releases the rest.
func (s *Spec) AttachBare(ctx context.Context, a *cniplug.Args, c *Conf, pod *netops.Handle, record func(*store.Endpoint), create func() (netops.SubLink, error)) (types.Result, error) {
	return s.attachDevice(ctx, a, c, pod, device{record: record, create: create})
}

// CheckBare is the CHECK of a masterless kind: the pod's device is of s's
// kind, up, with the MAC, addresses and routes of prevResult, and IPAM's
// CHECK passes.
func (s *Spec) CheckBare(ctx context.Context, a *cniplug.Args, c *Conf) error {
	return s.checkBare(ctx, a, c)
}

// Plan is what goes on the pod's device: its addresses, then (once it is
// up) the routes.
type Plan = plan

// PlanOf works out from IPAM's result (nil without IPAM) what the pod gets
// on CNI_IFNAME and fills res's IPs (on interface 0), routes and DNS (the
// config's dns when set, else IPAM's) with it.
func PlanOf(a *cniplug.Args, c *Conf, ipamRes, res *current.Result) *Plan {
	return planOf(a, c, ipamRes, res)
}

// Apply puts p on the pod's CNI_IFNAME: the announcements s asks for, the
// addresses, up, then the routes.
func (s *Spec) Apply(pod *netops.Handle, a *cniplug.Args, p *Plan) error { return s.apply(pod, a, p) }
