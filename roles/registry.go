// Package roles holds the one explicit list of the CNI roles that cnibox
// answers as. Each role lives in its own package below; nothing registers
// itself.
package roles

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/azurevnet"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/cloudipam"
	"github.com/cnibox/cnibox/roles/dhcp"
	"github.com/cnibox/cnibox/roles/dummy"
	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/hostdevice"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/ipvlan"
	"github.com/cnibox/cnibox/roles/loopback"
	"github.com/cnibox/cnibox/roles/macvlan"
	"github.com/cnibox/cnibox/roles/multi"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/roles/ptp"
	"github.com/cnibox/cnibox/roles/sbr"
	"github.com/cnibox/cnibox/roles/static"
	"github.com/cnibox/cnibox/roles/tap"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/roles/vlan"
	"github.com/cnibox/cnibox/roles/vrf"
	"github.com/cnibox/cnibox/roles/vxlan"
	"github.com/cnibox/cnibox/roles/whereabouts"
)

// Registry returns every role of the cnibox binary. A duplicate name panics.
func Registry() *cniplug.Registry {
	return cniplug.NewRegistry(
		bridge.Role,
		azurevnet.Role,
		cloudipam.Role,
		cloudipam.AzureRole,
		hostlocal.Role,
		static.Role,
		loopback.Role,
		flannel.Role,
		multi.Role,
		multi.MultusRole,
		multi.MultusShimRole,
		multi.PassthruRole,
		portmap.Role,
		tuning.Role,
		bandwidth.Role,
		vxlan.Role,
		ptp.Role,
		macvlan.Role,
		ipvlan.Role,
		vlan.Role,
		dummy.Role,
		hostdevice.Role,
		tap.Role,
		sbr.Role,
		vrf.Role,
		firewall.Role,
		dhcp.Role,
		whereabouts.Role,
	)
}
