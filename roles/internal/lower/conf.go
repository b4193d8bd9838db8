package lower

import (
	"net"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Conf is the config of a macvlan or ipvlan network, field names as in the
// reference plugins.
type Conf struct {
	Master          string    `json:"master"`
	Mode            string    `json:"mode"`
	MTU             int       `json:"mtu"`
	MAC             string    `json:"mac,omitempty"`
	LinkInContainer bool      `json:"linkInContainer,omitempty"`
	BCQueueLen      int       `json:"bcqueuelen,omitempty"`
	DNS             types.DNS `json:"dns"`
	// DataDir is where the endpoint records are kept (default: see store.Dir).
	DataDir string `json:"dataDir,omitempty"`
	// AllowVethMaster lets a linkInContainer master be a veth whose peer
	// is outside the pod (vethMaster).
	AllowVethMaster bool `json:"allowVethMaster,omitempty"`

	mac  net.HardwareAddr // the MAC asked for, by whichever source wins
	spec *Spec            // the kind whose parse made the Conf
}

// parseConf decodes and validates the fields of stdin. The master is
// resolved later (resolveMaster): it needs the kernel.
func (s *Spec) parseConf(a *cniplug.Args) (*Conf, error) {
	c := Conf{spec: s}
	if err := cniplug.DecodeConf(s.Kind+" config", a.StdinData, &c); err != nil {
		return nil, err
	}
	if c.Mode == "" {
		c.Mode = s.Modes[0]
	}
	if !slices.Contains(s.Modes, c.Mode) {
		return nil, cniplug.Errorf(types.ErrUnsupportedField, "config field \"mode\" %q is not a %s mode: use one of %s", c.Mode, s.Kind, strings.Join(s.Modes, ", "))
	}
	if c.Master != "" {
		if err := utils.ValidateInterfaceName(c.Master); err != nil {
			return nil, cniplug.ConfError("master", "%q is not a valid interface name: %s", c.Master, err.Msg)
		}
	}
	if c.MTU < 0 || c.MTU > 65535 || (c.MTU > 0 && c.MTU < 68) {
		return nil, cniplug.ConfError("mtu", "%d is out of range: use 0 (the master's MTU) or 68 up to the master's MTU", c.MTU)
	}
	if !s.MAC {
		return &c, nil
	}
	if c.BCQueueLen < 0 {
		return nil, cniplug.ConfError("bcqueuelen", "%d is negative: use 0 (kernel default) or a queue length", c.BCQueueLen)
	}
	mac, err := a.RequestedMAC()
	if err != nil {
		return nil, err
	}
	if mac == nil && c.MAC != "" {
		if mac, err = net.ParseMAC(c.MAC); err != nil || len(mac) != 6 || mac[0]&1 != 0 {
			return nil, cniplug.ConfError("mac", "%q is not a unicast Ethernet MAC address (want e.g. 0a:58:0a:f4:00:05)", c.MAC)
		}
	}
	c.mac = mac
	return &c, nil
}

// resolveMaster fills in the default master (the interface of the default
// route of h's namespace) and returns the master, checking the MTU against
// it.
func (s *Spec) resolveMaster(h *netops.Handle, c *Conf) (netops.Link, error) {
	where := "the node"
	if c.LinkInContainer {
		where = "the pod"
	}
	if c.Master == "" {
		rs, err := h.Routes("")
		if err != nil {
			return netops.Link{}, cniplug.WithCode(types.ErrIOFailure, err)
		}
		for _, r := range rs {
			if r.Dst.Bits() == 0 && r.Dev != "" && r.Table == 0 {
				c.Master = r.Dev
				break
			}
		}
		if c.Master == "" {
			return netops.Link{}, cniplug.ConfError("master", "not set, and %s has no default route to take its interface from: set \"master\" to the interface the %s devices go on", where, s.Kind)
		}
	}
	m, err := h.LinkByName(c.Master)
	if err != nil {
		return netops.Link{}, cniplug.ConfError("master", "%q: no such interface in %s (%v): fix \"master\"%s", c.Master, where, err, linkHint(c))
	}
	if c.MTU > m.MTU {
		return netops.Link{}, cniplug.ConfError("mtu", "%d is larger than the MTU %d of master %q: use at most %d, or 0 for the master's", c.MTU, m.MTU, c.Master, m.MTU)
	}
	return m, nil
}

func linkHint(c *Conf) string {
	if c.LinkInContainer {
		return " or drop \"linkInContainer\" to take it from the node"
	}
	return " or set \"linkInContainer\": true if it is in the pod"
}

// open opens the pod's namespace (code 3 when it cannot) and mh, the one the
// master is in: the node's (code 5 when it cannot), or with linkInContainer
// the pod's. It resolves the master there (see resolveMaster). closeNS
// closes what it opened.
func (s *Spec) open(a *cniplug.Args, c *Conf) (pod, mh *netops.Handle, closeNS func(), err error) {
	if pod, err = podns.Open(a.Netns); err != nil {
		return nil, nil, nil, err
	}
	mh = pod
	if !c.LinkInContainer {
		if mh, err = podns.Host(); err != nil {
			_ = pod.Close()
			return nil, nil, nil, err
		}
	}
	closeNS = func() {
		if mh != pod {
			_ = mh.Close()
		}
		_ = pod.Close()
	}
	if _, err := s.resolveMaster(mh, c); err != nil {
		closeNS()
		return nil, nil, nil, err
	}
	return pod, mh, closeNS, nil
}
