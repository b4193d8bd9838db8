package portmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/store"
)

// Role is the "portmap" role: a chained plugin that forwards host ports to
// the pod (the portMappings capability) with nftables maps in the node's
// table inet cnibox-portmap.
var Role = &cniplug.Role{
	Name: "portmap",
	About: "portmap forwards ports of the node to the pod, from other hosts, from the node itself (also 127.0.0.1) " +
		"and from the pod itself (hairpin). It is a chained plugin: put it after the main plugin in a conflist with " +
		"\"capabilities\": {\"portMappings\": true}; the runtime passes the mappings in runtimeConfig.portMappings.",
	Add:    chain.Add(parseStrict, portmapAdd),
	Check:  chain.Check(parseStrict, portmapCheck),
	Del:    cniplug.WithConf(parseLenient, portmapDel),
	GC:     cniplug.WithConf(parseLenient, portmapGC),
	Status: func(context.Context, *cniplug.Args) error { return nil },
}

// portmapConf is the portmap config, field names as in the reference plugin.
type portmapConf struct {
	SNAT                 *bool     `json:"snat,omitempty"`
	MasqAll              bool      `json:"masqAll,omitempty"`
	MarkMasqBit          *int      `json:"markMasqBit,omitempty"`
	ExternalSetMarkChain *string   `json:"externalSetMarkChain,omitempty"`
	ConditionsV4         *[]string `json:"conditionsV4,omitempty"`
	ConditionsV6         *[]string `json:"conditionsV6,omitempty"`
	Backend              string    `json:"backend,omitempty"`
	// DataDir is where the records are kept (default: see store.Dir).
	DataDir       string `json:"dataDir,omitempty"`
	RuntimeConfig struct {
		PortMappings []portMappingJSON `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`

	snat    bool
	entries []pmEntry
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
	proto    netops.PortProto
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
	if err := json.Unmarshal(a.StdinData, c); err != nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "portmap config: %v", err)
	}
	c.snat = c.SNAT == nil || *c.SNAT
	if strict {
		if err := c.validateFields(); err != nil {
			return nil, err
		}
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
	p, ok := netops.ParsePortProto(proto)
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

// podPrefixes returns the pod's first IPv4 and first IPv6 address (with its
// prefix length) on the interface CNI_IFNAME, as the reference plugin picks
// them from prevResult.
func podPrefixes(prev *current.Result, ifname string) []netip.Prefix {
	var out []netip.Prefix
	have := map[bool]bool{}
	for _, ipc := range prev.IPs {
		if i := ipc.Interface; i != nil && *i >= 0 && *i < len(prev.Interfaces) {
			ifc := prev.Interfaces[*i]
			if ifc.Name != ifname || ifc.Sandbox == "" {
				continue
			}
		}
		p, ok := prefixOfIPNet(ipc.Address)
		if !ok || have[p.Addr().Is4()] {
			continue
		}
		have[p.Addr().Is4()] = true
		out = append(out, p)
	}
	return out
}

func prefixOfIPNet(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		ones = a.BitLen()
	}
	if a.Is4() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

// portMaps returns what the attachment forwards for the pod addresses ips:
// each entry for each address of its host IP's family, and with snat the
// masquerade entry of each address that has a mapping.
func (c *portmapConf) portMaps(owner string, ips []netip.Prefix) (netops.PortMaps, error) {
	pm := netops.PortMaps{Owner: owner}
	for _, p := range ips {
		var mine []netops.PortMapping
		var from []pmEntry
		for _, e := range c.entries {
			host := e.hostIP
			if host.IsValid() && host.Is4() != p.Addr().Is4() {
				continue
			}
			if host.IsValid() && host.IsUnspecified() {
				host = netip.Addr{}
			}
			m := netops.PortMapping{Proto: e.proto, HostIP: host, HostPort: e.hostPort, PodIP: p.Addr(), PodPort: e.podPort}
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
			pm.Masq = append(pm.Masq, netops.PortMasq{PodIP: p.Addr(), All: c.MasqAll})
		}
	}
	return pm, nil
}

// Owners. Every element's comment is "<network> <containerID> <ifname>"; a
// network name or container ID too long for the comment is replaced by "#"
// and 32 hex digits of its sha256.

func ownerToken(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:16])
}

func pmOwner(network, containerID, ifname string) string {
	return ownerToken(network, 100) + " " + ownerToken(containerID, 128) + " " + ifname
}

// ownerNetwork returns the network token of an owner comment.
func ownerNetwork(owner string) string {
	n, _, _ := strings.Cut(owner, " ")
	return n
}

// parseOwner returns the attachment of an owner comment; ok is false for a
// foreign or hashed one.
func parseOwner(owner string) (network, containerID, ifname string, ok bool) {
	f := strings.Split(owner, " ")
	if len(f) != 3 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[1], "#") {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// Records.

func recordOf(a *cniplug.Args, pm netops.PortMaps) store.PortMapRecord {
	r := store.PortMapRecord{Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Pod: a.CNIArgs.Pod()}
	for _, m := range pm.Mappings {
		r.Mappings = append(r.Mappings, store.PortMapEntry{Protocol: m.Proto.String(), HostIP: m.HostIP, HostPort: m.HostPort, PodIP: m.PodIP, PodPort: m.PodPort})
	}
	for _, m := range pm.Masq {
		r.Masq = append(r.Masq, store.PortMasqEntry{PodIP: m.PodIP, All: m.All})
	}
	return r
}

func portMapsOf(r store.PortMapRecord) netops.PortMaps {
	pm := netops.PortMaps{Owner: pmOwner(r.Network, r.ContainerID, r.IfName)}
	for _, m := range r.Mappings {
		p, ok := netops.ParsePortProto(m.Protocol)
		if !ok {
			continue
		}
		pm.Mappings = append(pm.Mappings, netops.PortMapping{Proto: p, HostIP: m.HostIP, HostPort: m.HostPort, PodIP: m.PodIP, PodPort: m.PodPort})
	}
	for _, m := range r.Masq {
		pm.Masq = append(pm.Masq, netops.PortMasq{PodIP: m.PodIP, All: m.All})
	}
	return pm
}

func pmStore(a *cniplug.Args, c *portmapConf) (*store.Store, error) {
	return store.Open(store.DirFrom(c.DataDir, a.Getenv))
}

// pmRecord reads the record of the call's attachment.
func pmRecord(a *cniplug.Args, c *portmapConf) (rec store.PortMapRecord, found bool, err error) {
	st, err := pmStore(a, c)
	if err != nil {
		return rec, false, err
	}
	defer st.Close()
	err = st.ViewPortMaps(func(tx *store.PortMapTx) error {
		rec, found, err = tx.Get(a.Conf.Name, a.ContainerID, a.IfName)
		return err
	})
	return rec, found, err
}

func pmLog(a *cniplug.Args, format string, args ...any) {
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, "cnibox portmap: "+format+"\n", args...)
	}
}
