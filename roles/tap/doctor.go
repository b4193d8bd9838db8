package tap

import (
	"github.com/cnibox/cnibox/cniplug"
)

// doctor checks that the tap is a port of the bridge in the pod its record
// names.
func doctor(c *cniplug.EndpointCheck) {
	ep := c.Endpoint
	br := ep.Extra["bridge"]
	if ep.Plugin != "tap" || br == "" || c.Pod == nil {
		return
	}
	b, err := c.Pod.LinkByName(br)
	switch {
	case err != nil:
		c.Fail("tap bridge", c.Recreate, "bridge %s is missing in the pod", br)
	case c.PodLink.MasterIndex != b.Index:
		c.Fail("tap bridge", c.InPod+" link set "+ep.IfName+" master "+br, "%s is not a port of bridge %s in the pod", ep.IfName, br)
	default:
		c.Pass("tap bridge", "%s is a port of bridge %s in the pod", ep.IfName, br)
	}
}
