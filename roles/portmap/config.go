package portmap

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nft"
)

// portmapConf is the portmap config, field names as in the reference plugin.
type portmapConf struct {
	SNAT                 *bool     `json:"snat,omitempty"`
	MasqAll              bool      `json:"masqAll,omitempty"`
	MarkMasqBit          *int      `json:"markMasqBit,omitempty"`
	ExternalSetMarkChain *string   `json:"externalSetMarkChain,omitempty"`
	ConditionsV4         *[]string `json:"conditionsV4,omitempty"`
	ConditionsV6         *[]string `json:"conditionsV6,omitempty"`
	Backend              string    `json:"backend,omitempty"`
	// AllowedHostIPs are addresses and prefixes a hostIP may name besides
	// the node's own addresses (see checkHostIPs): VIPs the operator means
	// pods to serve on. cnibox's own field; the reference plugin has none.
	AllowedHostIPs []string `json:"allowedHostIPs,omitempty"`
	// DataDir is where the records are kept (default: see store.Dir).
	DataDir       string `json:"dataDir,omitempty"`
	RuntimeConfig struct {
		PortMappings []portMappingJSON `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`

	snat    bool
	entries []pmEntry
	allowed []netip.Prefix // AllowedHostIPs, parsed
}

// portMappingJSON is one entry of the portMappings capability.
type portMappingJSON struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// pmEntry is a validated portMappings entry.
type pmEntry struct {
	index    int // in runtimeConfig.portMappings, for messages
	proto    nft.PortProto
	hostIP   netip.Addr // zero: every address; unspecified (0.0.0.0, ::): every address of its family
	hostPort uint16
	podPort  uint16
}

// parseStrict is parsePortmapConf for ADD and CHECK, parseLenient for DEL
// and GC.
func parseStrict(a *cniplug.Args) (*portmapConf, error)  { return parsePortmapConf(a, true) }
func parseLenient(a *cniplug.Args) (*portmapConf, error) { return parsePortmapConf(a, false) }

// parsePortmapConf decodes and validates the config. With strict false (DEL,
// GC) unsupported fields are accepted and invalid entries skipped: nothing
// can have been set up for them, and the cleanup must not fail.
func parsePortmapConf(a *cniplug.Args, strict bool) (*portmapConf, error) {
	c := &portmapConf{}
	if err := cniplug.DecodeConf("portmap config", a.StdinData, c); err != nil {
		return nil, err
	}
	c.snat = c.SNAT == nil || *c.SNAT
	if strict {
		if err := c.validateFields(); err != nil {
			return nil, err
		}
	}
	if err := c.parseAllowed(); err != nil && strict {
		return nil, err
	}
	for i, m := range c.RuntimeConfig.PortMappings {
		e, err := parseEntry(i, m)
		if err != nil {
			if strict {
				return nil, err
			}
			continue
		}
		c.entries = append(c.entries, e)
	}
	return c, nil
}

func (c *portmapConf) validateFields() error {
	if c.MarkMasqBit != nil && c.ExternalSetMarkChain != nil {
		return cniplug.ConfError("markMasqBit", "cannot be set together with \"externalSetMarkChain\": remove one of them")
	}
	if b := c.MarkMasqBit; b != nil && (*b < 0 || *b > 31) {
		return cniplug.ConfError("markMasqBit", "%d is out of range: use 0..31 (or leave it out: cnibox does not need a mark)", *b)
	}
	if c.ExternalSetMarkChain != nil {
		return cniplug.Errorf(types.ErrUnsupportedField, "config field \"externalSetMarkChain\" %q is not supported: cnibox's portmap masquerades with its own nftables rules and cannot jump to an iptables chain; remove the field", *c.ExternalSetMarkChain)
	}
	for _, f := range []struct {
		name  string
		conds *[]string
	}{{"conditionsV4", c.ConditionsV4}, {"conditionsV6", c.ConditionsV6}} {
		if f.conds != nil && len(*f.conds) > 0 {
			return cniplug.Errorf(types.ErrUnsupportedField, "config field %q %q is not supported: these are iptables matches and cnibox's portmap uses nftables maps; remove the field", f.name, *f.conds)
		}
	}
	switch c.Backend {
	case "", "nftables", "iptables":
		// cnibox always uses nftables; "iptables" is accepted for drop-in configs.
	default:
		return cniplug.Errorf(types.ErrUnsupportedField, "config field \"backend\" %q is not supported: use \"nftables\" or leave it out", c.Backend)
	}
	return nil
}

// parseAllowed parses AllowedHostIPs into c.allowed: each an address
// (192.0.2.100, 2001:db8::100) or a prefix (192.0.2.96/28); an invalid
// entry is code 7 naming it.
func (c *portmapConf) parseAllowed() error {
	for i, s := range c.AllowedHostIPs {
		p, err := netip.ParsePrefix(s)
		if err == nil {
			p = p.Masked()
		} else if a, aerr := netip.ParseAddr(s); aerr == nil && a.Zone() == "" {
			p, err = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
		}
		if err != nil || p.Addr().Is4In6() {
			return cniplug.ConfError(fmt.Sprintf("allowedHostIPs[%d]", i), "%q is not an IP address or prefix: use e.g. \"192.0.2.100\", \"192.0.2.96/28\" or \"2001:db8::100\"", s)
		}
		c.allowed = append(c.allowed, p)
	}
	return nil
}

func parseEntry(i int, m portMappingJSON) (pmEntry, error) {
	field := func(name string) string { return fmt.Sprintf("runtimeConfig.portMappings[%d].%s", i, name) }
	e := pmEntry{index: i}
	if m.HostPort < 1 || m.HostPort > 65535 {
		return e, cniplug.ConfError(field("hostPort"), "%d is out of range: use 1..65535", m.HostPort)
	}
	if m.ContainerPort < 1 || m.ContainerPort > 65535 {
		return e, cniplug.ConfError(field("containerPort"), "%d is out of range: use 1..65535", m.ContainerPort)
	}
	e.hostPort, e.podPort = uint16(m.HostPort), uint16(m.ContainerPort)
	proto := m.Protocol
	if proto == "" {
		proto = "tcp"
	}
	p, ok := nft.ParsePortProto(proto)
	if !ok {
		return e, cniplug.Errorf(types.ErrUnsupportedField, "config field %q %q is not supported: use \"tcp\", \"udp\" or \"sctp\"", field("protocol"), m.Protocol)
	}
	e.proto = p
	if m.HostIP != "" {
		ip, err := netip.ParseAddr(m.HostIP)
		if err != nil || ip.Zone() != "" {
			return e, cniplug.ConfError(field("hostIP"), "%q is not an IP address: use e.g. 192.0.2.10 or 2001:db8::10, or leave it out for every address of the node", m.HostIP)
		}
		e.hostIP = ip.Unmap()
	}
	return e, nil
}

// portMaps returns what the attachment forwards for the pod addresses ips:
// each entry for each address of its host IP's family, and with snat the
// masquerade entry of each address that has a mapping.
func (c *portmapConf) portMaps(owner string, ips []netip.Prefix) (nft.PortMaps, error) {
	pm := nft.PortMaps{Owner: owner}
	for _, p := range ips {
		var mine []nft.PortMapping
		var from []pmEntry
		for _, e := range c.entries {
			host := e.hostIP
			if host.IsValid() && host.Is4() != p.Addr().Is4() {
				continue
			}
			if host.IsValid() && host.IsUnspecified() {
				host = netip.Addr{}
			}
			m := nft.PortMapping{Proto: e.proto, HostIP: host, HostPort: e.hostPort, PodIP: p.Addr(), PodPort: e.podPort}
			dup := false
			for j, o := range mine {
				if !o.SameKey(m) {
					continue
				}
				if o.PodPort != m.PodPort {
					return pm, cniplug.ConfError(fmt.Sprintf("runtimeConfig.portMappings[%d]", e.index),
						"host port %d/%s is already mapped to container port %d by entry %d: map each host port once",
						e.hostPort, e.proto, o.PodPort, from[j].index)
				}
				dup = true
			}
			if !dup {
				mine = append(mine, m)
				from = append(from, e)
			}
		}
		pm.Mappings = append(pm.Mappings, mine...)
		if c.snat && len(mine) > 0 {
			pm.Masq = append(pm.Masq, nft.PortMasq{PodIP: p.Addr(), All: c.MasqAll})
		}
	}
	return pm, nil
}
