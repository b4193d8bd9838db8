package portmap

import (
	"net"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/chain"
)

// Role is the "portmap" role: a chained plugin that forwards host ports to
// the pod (the portMappings capability) with nftables maps in the node's
// table inet cnibox-portmap.
var Role = &cniplug.Role{
	Name: "portmap",
	About: "portmap forwards ports of the node to the pod, from other hosts, from the node itself (also 127.0.0.1) " +
		"and from the pod itself (hairpin). It is a chained plugin: put it after the main plugin in a conflist with " +
		"\"capabilities\": {\"portMappings\": true}; the runtime passes the mappings in runtimeConfig.portMappings.",
	// DEL and GC parse leniently (see parseStrict).
	Verbs: &chain.Verbs[*portmapConf]{Parse: parseStrict, Add: portmapAdd, Check: portmapCheck,
		ParseDel: parseLenient, Del: portmapDel, ParseGC: parseLenient, GC: portmapGC},

	Known: &known,
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

// prefixOfIPNet converts a result address to netip form: an IPv4 address
// with a 16-byte mask keeps its IPv4 length, a missing mask is a host
// prefix.
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
