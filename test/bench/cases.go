package main

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// cniCase is one conflist shape run against both sides.
type cniCase struct {
	key     string   // the -cases name
	name    string   // shown in the table
	plugins []string // plugin types both sides need
}

var cniCases = []*cniCase{
	{key: "bridge", name: "bridge+host-local", plugins: []string{"bridge", "host-local"}},
	{key: "chain", name: "bridge+host-local+portmap+tuning", plugins: []string{"bridge", "host-local", "portmap", "tuning"}},
}

// netName is the network name of every case's conflist.
const netName = "benchnet"

// podSubnetBits is the prefix length of a side's pod subnet: /24 like the
// seed conflist while n pods fit in it.
func podSubnetBits(n int) int {
	bits := 24
	for bits > 16 && (1<<(32-bits))-3 < n {
		bits--
	}
	return bits
}

// pluginConfs returns the plugin configs of case c on side s, like
// test/e2e/testdata/host-local-10-234-58.conflist (isGateway,
// ipMasq) plus portmap (portMappings capability) and tuning (one sysctl).
func (c *cniCase) pluginConfs(s *side, n int) []map[string]any {
	subnet := s.subnet.Addr().String() + fmt.Sprintf("/%d", podSubnetBits(n))
	ipamConf := map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]any{{{"subnet": subnet}}},
		"routes":  []map[string]any{{"dst": "0.0.0.0/0"}},
		"dataDir": s.dataDir,
	}
	out := []map[string]any{{
		"type":      "bridge",
		"bridge":    s.bridge,
		"isGateway": true,
		"ipMasq":    true,
		"ipam":      ipamConf,
	}}
	for _, p := range c.plugins[2:] {
		switch p {
		case "portmap":
			out = append(out, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
		case "tuning":
			out = append(out, map[string]any{"type": "tuning", "sysctl": map[string]string{"net.core.somaxconn": "512"}})
		}
	}
	return out
}

// list returns the conflist of case c on side s.
func (c *cniCase) list(s *side, n int) (*libcni.NetworkConfigList, error) {
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
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
