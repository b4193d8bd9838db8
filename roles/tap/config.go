package tap

import (
	"math"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// conf is a tap network: lower's fields (mtu, mac, dns, dataDir) and the
// tap's own, names as in the reference plugin.
type conf struct {
	*lower.Conf
	MultiQueue bool
	// Owner and Group may attach to the tap without CAP_NET_ADMIN; nil:
	// none is set.
	Owner, Group *uint32
	// Label is selinuxContext when the node runs SELinux, else "".
	Label  string
	Bridge string
}

// maxMTU is the largest MTU of a tap: 65535 less its Ethernet header.
const maxMTU = 65521

// selinuxEnforce is the file that is there when the node runs SELinux.
var selinuxEnforce = "/sys/fs/selinux/enforce"

// tapJSON are the tap's own fields as written.
type tapJSON struct {
	MTU            int    `json:"mtu"`
	MultiQueue     bool   `json:"multiQueue"`
	Owner          *int64 `json:"owner"`
	Group          *int64 `json:"group"`
	SelinuxContext string `json:"selinuxContext"`
	Bridge         string `json:"bridge"`
}

// parse decodes and checks the tap's fields, then lower's.
func parse(a *cniplug.Args) (conf, error) {
	var raw tapJSON
	if err := cniplug.DecodeConf("tap config", a.StdinData, &raw); err != nil {
		return conf{}, err
	}
	if raw.MTU < 0 || raw.MTU > maxMTU || (raw.MTU > 0 && raw.MTU < 68) {
		return conf{}, cniplug.ConfError("mtu", "%d is out of range: use 0 (the kernel's 1500) or 68 to %d", raw.MTU, maxMTU)
	}
	c := conf{MultiQueue: raw.MultiQueue, Bridge: raw.Bridge}
	var err error
	if c.Owner, err = id("owner", "user", raw.Owner); err != nil {
		return conf{}, err
	}
	if c.Group, err = id("group", "group", raw.Group); err != nil {
		return conf{}, err
	}
	if c.Bridge != "" {
		if err := utils.ValidateInterfaceName(c.Bridge); err != nil {
			return conf{}, cniplug.ConfError("bridge", "%q is not a valid interface name: %s", c.Bridge, err.Msg)
		}
	}
	if s := raw.SelinuxContext; s != "" {
		if strings.Count(s, ":") < 2 || strings.ContainsAny(s, "\x00\n ") {
			return conf{}, cniplug.ConfError("selinuxContext", "%q is not an SELinux context: use user:role:type[:level], e.g. system_u:system_r:container_t:s0", s)
		}
		if _, err := os.Stat(selinuxEnforce); err == nil {
			c.Label = s
		}
	}
	if c.Conf, err = spec.ParseConf(a); err != nil {
		return conf{}, err
	}
	return c, nil
}

// id checks a user or group ID of field: 0 up to 2^32-2 (the kernel takes
// 2^32-1 for "none").
func id(field, what string, v *int64) (*uint32, error) {
	if v == nil {
		return nil, nil
	}
	if *v < 0 || *v >= math.MaxUint32 {
		return nil, cniplug.ConfError(field, "%d is not a %s ID: use 0 to %d, or leave %q out so that only a process with CAP_NET_ADMIN may attach", *v, what, uint32(math.MaxUint32-1), field)
	}
	u := uint32(*v)
	return &u, nil
}
