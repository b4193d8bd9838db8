package cniplug

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// NetConf holds the fields that the CNI spec and its conventions give every
// plugin's config. Roles decode their own fields from Args.StdinData.
type NetConf struct {
	types.PluginConf
	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitempty"`
	Args          struct {
		CNI ArgsCNI `json:"cni,omitempty"`
	} `json:"args,omitempty"`
	// ValidAttachments is what GC keeps (spec 1.1: cni.dev/valid-attachments;
	// cni.dev/attachments is accepted as a synonym).
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
	Attachments      []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	keep map[types.GCAttachment]bool
}

// RuntimeConfig carries the capability arguments that runtimes pass.
type RuntimeConfig struct {
	IPs      []string        `json:"ips,omitempty"`
	MAC      string          `json:"mac,omitempty"`
	IPRanges json.RawMessage `json:"ipRanges,omitempty"`
}

// ArgsCNI is the "args": {"cni": {...}} convention.
type ArgsCNI struct {
	IPs []string `json:"ips,omitempty"`
	MAC string   `json:"mac,omitempty"`
}

// GCKeep returns the attachments that GC must keep, from either key.
func (c *NetConf) GCKeep() []types.GCAttachment {
	return append(append([]types.GCAttachment(nil), c.ValidAttachments...), c.Attachments...)
}

// Keeps reports whether the attachment (containerID, ifname) is in GC's valid
// list. The list is indexed on first use, so GC stays linear.
func (c *NetConf) Keeps(containerID, ifname string) bool {
	if c.keep == nil {
		c.keep = make(map[types.GCAttachment]bool, len(c.ValidAttachments)+len(c.Attachments))
		for _, a := range c.GCKeep() {
			c.keep[a] = true
		}
	}
	return c.keep[types.GCAttachment{ContainerID: containerID, IfName: ifname}]
}

// decodeConf parses stdin into the common config and its previous result.
func decodeConf(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, DecodeError("stdin", stdin, conf, err)
	}
	if conf.Name == "" {
		return nil, Errorf(types.ErrInvalidNetworkConfig, `config field "name" is missing: every network config needs a name`)
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			return nil, Errorf(types.ErrDecodingFailure, "config field \"prevResult\" cannot be read as a cniVersion %s result: %w", conf.CNIVersion, err)
		}
	}
	return conf, nil
}

// PrevResult returns the previous result of a chain converted to the current
// result type, or nil when there is none.
func (c *NetConf) PrevResult() (*current.Result, error) {
	if c.PluginConf.PrevResult == nil {
		return nil, nil
	}
	r, err := current.NewResultFromResult(c.PluginConf.PrevResult)
	if err != nil {
		return nil, Errorf(types.ErrDecodingFailure, "config field \"prevResult\": %w", err)
	}
	return r, nil
}

// ParseIPList parses addresses given as "10.1.2.3" or "10.1.2.3/24" (the
// prefix length is dropped), comma separated entries allowed. field names the
// source for the error message.
func ParseIPList(field string, in []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, entry := range in {
		for _, s := range strings.Split(entry, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if i := strings.IndexByte(s, '/'); i >= 0 {
				s = s[:i]
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, Errorf(types.ErrInvalidNetworkConfig, "%s: %q is not an IP address (want e.g. 10.1.2.3 or fd00::3)", field, s)
			}
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// RequestedIPs gathers the addresses asked for by CNI_ARGS IP=, args.cni.ips
// and runtimeConfig.ips, without duplicates.
func (a *Args) RequestedIPs() ([]netip.Addr, error) {
	var all []netip.Addr
	sources := []struct {
		field string
		vals  []string
	}{
		{"CNI_ARGS IP", []string{string(a.CNIArgs.IP)}},
		{"args.cni.ips", a.Conf.Args.CNI.IPs},
		{"runtimeConfig.ips", a.Conf.RuntimeConfig.IPs},
	}
	for _, s := range sources {
		ips, err := ParseIPList(s.field, s.vals)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			dup := false
			for _, have := range all {
				dup = dup || have == ip
			}
			if !dup {
				all = append(all, ip)
			}
		}
	}
	return all, nil
}

// RequestedMAC returns the MAC asked for by runtimeConfig.mac, args.cni.mac or
// CNI_ARGS MAC= (in that order of precedence), or nil.
func (a *Args) RequestedMAC() (net.HardwareAddr, error) {
	for _, s := range []struct{ field, val string }{
		{"runtimeConfig.mac", a.Conf.RuntimeConfig.MAC},
		{"args.cni.mac", a.Conf.Args.CNI.MAC},
		{"CNI_ARGS MAC", string(a.CNIArgs.MAC)},
	} {
		if s.val == "" {
			continue
		}
		mac, err := net.ParseMAC(s.val)
		if err != nil || len(mac) != 6 || mac[0]&1 != 0 { // a multicast address is no interface's
			return nil, Errorf(types.ErrInvalidNetworkConfig, "%s: %q is not a unicast Ethernet MAC address (want e.g. 0a:58:0a:f4:00:05)", s.field, s.val)
		}
		return mac, nil
	}
	return nil, nil
}

// ConfError returns a config error (code 7) that names the field.
func ConfError(field string, format string, args ...any) error {
	return Errorf(types.ErrInvalidNetworkConfig, "config field %q: %s", field, fmt.Sprintf(format, args...))
}
