package main

import (
	"encoding/json"
	"net/netip"

	"github.com/containernetworking/cni/libcni"
)

// cniCase is one conflist shape run against both sides.
type cniCase struct {
	key     string   // the -cases name
	name    string   // shown in the table
	plugins []string // plugin types both sides need; the first is the main plugin
	version string   // the conflist's cniVersion ("" = 1.0.0)
	podman  bool     // the plugin configs `podman network create` writes
}

var cniCases = []*cniCase{
	{key: "bridge", name: "bridge+host-local", plugins: []string{"bridge", "host-local"}},
	{key: "chain", name: "bridge+host-local+portmap+tuning", plugins: []string{"bridge", "host-local", "portmap", "tuning"}},
	{key: "ptp", name: "ptp+host-local", plugins: []string{"ptp", "host-local"}},
	{key: "macvlan", name: "macvlan+host-local", plugins: []string{"macvlan", "host-local"}},
	// podman 4.3's CNI backend: `podman network create` writes cniVersion
	// 0.4.0, bridge (hairpinMode, the ips capability, a gateway) + portmap +
	// firewall (backend "") + tuning (no fields).
	{key: "podman", name: "podman: bridge+host-local+portmap+firewall+tuning", plugins: []string{"bridge", "host-local", "portmap", "firewall", "tuning"}, version: "0.4.0", podman: true},
}

// netName is the network name of every case's conflist.
const netName = "benchnet"

// lowerName is the node's interface the macvlan case's pods hang off: one
// end of a veth pair whose other end is in a namespace standing for the LAN
// (the host kernel has no dummy device).
const lowerName = "cbench-lower"

// podSubnetBits is the prefix length of a side's pod subnet: /24 like the
// seed conflist while n pods fit in it.
func podSubnetBits(n int) int {
	bits := 24
	for bits > 16 && (1<<(32-bits))-3 < n {
		bits--
	}
	return bits
}

// linkKind is the kind of link a case's DEL deletes, which picks its
// kernel floor: "veth" or "macvlan".
func (c *cniCase) linkKind() string {
	if c.plugins[0] == "macvlan" {
		return "macvlan"
	}
	return "veth"
}

// masq reports whether the case's main plugin masquerades (the reference's
// per-pod iptables chains show its pods).
func (c *cniCase) masq() bool { return c.plugins[0] != "macvlan" }

func (c *cniCase) cniVersion() string {
	if c.version != "" {
		return c.version
	}
	return "1.0.0"
}

// pluginConfs returns the plugin configs of case c on side s, like
// test/e2e/testdata/host-local-10-234-58.conflist (isGateway,
// ipMasq) plus portmap (portMappings capability) and tuning (one sysctl);
// ptp masquerades as the bridge does; macvlan hangs off lowerName in
// bridge mode; the podman case is what `podman network create` writes.
func (c *cniCase) pluginConfs(s *side, n int) []map[string]any {
	subnet := netip.PrefixFrom(s.subnet.Addr(), podSubnetBits(n))
	rng := map[string]any{"subnet": subnet.String()}
	if c.podman {
		rng["gateway"] = subnet.Addr().Next().String()
	}
	ipamConf := map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]any{{rng}},
		"routes":  []map[string]any{{"dst": "0.0.0.0/0"}},
		"dataDir": s.dataDir,
	}
	var main map[string]any
	switch c.plugins[0] {
	case "ptp":
		main = map[string]any{"type": "ptp", "ipMasq": true, "ipam": ipamConf}
	case "macvlan":
		main = map[string]any{"type": "macvlan", "master": lowerName, "mode": "bridge", "ipam": ipamConf}
	default:
		main = map[string]any{
			"type":      "bridge",
			"bridge":    s.bridge,
			"isGateway": true,
			"ipMasq":    true,
			"ipam":      ipamConf,
		}
		if c.podman {
			main["hairpinMode"] = true
			main["capabilities"] = map[string]bool{"ips": true}
		}
	}
	out := []map[string]any{main}
	for _, p := range c.plugins[2:] {
		switch p {
		case "portmap":
			out = append(out, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
		case "firewall":
			out = append(out, map[string]any{"type": "firewall", "backend": ""})
		case "tuning":
			if c.podman {
				out = append(out, map[string]any{"type": "tuning"})
			} else {
				out = append(out, map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "512"}})
			}
		}
	}
	return out
}

// list returns the conflist of case c on side s.
func (c *cniCase) list(s *side, n int) (*libcni.NetworkConfigList, error) {
	b, err := json.Marshal(map[string]any{
		"cniVersion": c.cniVersion(),
		"name":       netName,
		"plugins":    c.pluginConfs(s, n),
	})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(b)
}

// hasPortmap reports whether the case maps ports.
func (c *cniCase) hasPortmap() bool {
	for _, p := range c.plugins {
		if p == "portmap" {
			return true
		}
	}
	return false
}

// caseByKey returns the case of a -cases name.
func caseByKey(key string) *cniCase {
	for _, c := range cniCases {
		if c.key == key {
			return c
		}
	}
	return nil
}
