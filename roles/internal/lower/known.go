package lower

import "github.com/containernetworking/cni/pkg/types"

// Conf's fields in groups by the kinds that read them, for the roles'
// cniplug.Known.Config: every kind decodes the whole Conf (a wrong JSON
// type in any of its fields is an error everywhere, as it always was), but
// declares only the groups it reads, so that `cnibox check` warns about a
// field the kind ignores ("mtu" on a dummy). TestFieldGroups holds their
// union equal to Conf.

// PodFields are read by every kind: the result's DNS and the store.
type PodFields struct {
	DNS     types.DNS `json:"dns"`
	DataDir string    `json:"dataDir"`
}

// MasterFields are read by the kinds on a master (macvlan, ipvlan, vlan).
type MasterFields struct {
	Master          string `json:"master"`
	MTU             int    `json:"mtu"`
	LinkInContainer bool   `json:"linkInContainer"`
	AllowVethMaster bool   `json:"allowVethMaster"`
}

// ModeField is read by the kinds with modes (macvlan, ipvlan); the kinds
// without one (vlan, dummy, tap) refuse it with code 2, which names it, so
// it is known to them too.
type ModeField struct {
	Mode string `json:"mode"`
}

// MACField is read by the kinds with a MAC of their own (macvlan, tap).
type MACField struct {
	MAC string `json:"mac"`
}

// BCQueueLenField is read by macvlan alone.
type BCQueueLenField struct {
	BCQueueLen int `json:"bcqueuelen"`
}
