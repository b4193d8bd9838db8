package netops

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/kerr"
)

// KernelFeature is what a node's kernel needs to create a link kind: the
// feature's name, its build option and its module.
type KernelFeature struct {
	Name   string // "802.1Q VLAN devices"
	Config string // "CONFIG_VLAN_8021Q"
	Module string // "8021q"
}

// linkKinds are the kinds LinkKindFeature knows, with what each needs: an
// array of constants, which the linker lays out (a package-level map would
// be built by code at every start).
var linkKinds = [...]struct {
	kind string
	KernelFeature
}{
	{"vlan", KernelFeature{"802.1Q VLAN devices", "CONFIG_VLAN_8021Q", "8021q"}},
	{"dummy", KernelFeature{"dummy devices", "CONFIG_DUMMY", "dummy"}},
	{"ipvlan", KernelFeature{"ipvlan devices", "CONFIG_IPVLAN", "ipvlan"}},
	{"macvlan", KernelFeature{"macvlan devices", "CONFIG_MACVLAN", "macvlan"}},
	{"vrf", KernelFeature{"VRF devices", "CONFIG_NET_VRF", "vrf"}},
	{"vxlan", KernelFeature{"VXLAN devices", "CONFIG_VXLAN", "vxlan"}},
	{"ifb", KernelFeature{"ifb devices", "CONFIG_IFB", "ifb"}},
	{"veth", KernelFeature{"veth pairs", "CONFIG_VETH", "veth"}},
	{"bridge", KernelFeature{"bridges", "CONFIG_BRIDGE", "bridge"}},
	{"tun", KernelFeature{"TUN/TAP devices", "CONFIG_TUN", "tun"}},
}

// LinkKindFeature returns what the kernel needs for links of kind (the
// kind netlink names: "vlan", "dummy", "ipvlan", ...); ok false for a kind
// it does not know.
func LinkKindFeature(kind string) (f KernelFeature, ok bool) {
	for _, k := range linkKinds {
		if k.kind == kind {
			return k.KernelFeature, true
		}
	}
	return KernelFeature{}, false
}

// String is the feature in the words of an error: "802.1Q VLAN devices
// (CONFIG_VLAN_8021Q, module 8021q)".
func (f KernelFeature) String() string {
	return fmt.Sprintf("%s (%s, module %s)", f.Name, f.Config, f.Module)
}

// kindErr is err from creating a link of kind: when the kernel answered
// that it does not support the kind (EOPNOTSUPP: no such link type, with or
// without the extack "Unknown device type"), an error that says which
// feature, option and module the node lacks and wraps ErrNotSupported;
// otherwise err classified.
func kindErr(kind string, err error) error {
	if err == nil {
		return nil
	}
	f, ok := LinkKindFeature(kind)
	if !ok || !errors.Is(err, unix.EOPNOTSUPP) {
		return classify(err)
	}
	return kerr.Wrap(ErrNotSupported, fmt.Errorf("the node's kernel has no %s: %w", f, err))
}
