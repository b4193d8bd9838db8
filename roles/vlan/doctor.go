package vlan

import (
	"strconv"

	"github.com/cnibox/cnibox/cniplug"
)

// doctor checks that the pod's vlan device tags the VLAN ID its record says.
func doctor(c *cniplug.EndpointCheck) {
	ep := c.Endpoint
	want := ep.Extra["vlanId"]
	if ep.Plugin != "vlan" || want == "" || c.Pod == nil {
		return
	}
	v, err := c.Pod.VlanByName(ep.IfName)
	switch {
	case err != nil:
		c.Fail("vlan", "", "read the VLAN ID of %s in the pod: %v", ep.IfName, err)
	case strconv.Itoa(v.ID) != want:
		c.Fail("vlan", c.Recreate, "%s in the pod tags VLAN %d, the record says %s", ep.IfName, v.ID, want)
	default:
		master := ep.Extra["master"]
		if master == "" {
			master = "-"
		}
		c.Pass("vlan", "%s in the pod tags VLAN %d of %s", ep.IfName, v.ID, master)
	}
}
