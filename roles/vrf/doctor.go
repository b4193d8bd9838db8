package vrf

import (
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// doctor declares the table of the VRF the pod's interface is in: the
// interface's routes live there on purpose, not in the main table.
func doctor(c *cniplug.EndpointCheck) {
	if c.Pod == nil || c.PodLink.MasterIndex == 0 {
		return
	}
	links, err := c.Pod.Links()
	if err != nil {
		return
	}
	i := slices.IndexFunc(links, func(l netops.Link) bool { return l.Index == c.PodLink.MasterIndex })
	if i < 0 || links[i].Kind != "vrf" {
		return
	}
	table, err := c.Pod.VRF(links[i].Name)
	if err != nil {
		c.Fail("vrf", "", "read the table of VRF %s in the pod: %v", links[i].Name, err)
		return
	}
	if t := int(table); !slices.Contains(c.Tables, t) {
		c.Tables = append(c.Tables, t)
	}
	c.Pass("vrf", "%s is in VRF %s: its routes are in table %d on purpose", c.Endpoint.IfName, links[i].Name, table)
}
