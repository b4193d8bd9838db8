package tuning

import (
	"github.com/cnibox/cnibox/cniplug"
)

// doctor says that tuning set the pod interface's MTU, when its record
// says so (it keeps the MTU from before, to restore on DEL): the MTU then
// differs from the host end's on purpose.
func doctor(c *cniplug.EndpointCheck) {
	ep := c.Endpoint
	if c.Store == nil {
		return
	}
	rec, ok, err := Records.In(c.Store).Get(ep.Network, ep.ContainerID, ep.IfName)
	if err != nil || !ok || rec.MTU == 0 {
		return
	}
	c.MTUSetBy = "tuning"
	if c.Pod != nil {
		c.Pass("tuning", "tuning set %s's mtu to %d (it was %d; DEL restores it)", ep.IfName, c.PodLink.MTU, rec.MTU)
	}
}
