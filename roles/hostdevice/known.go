package hostdevice

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	NodeFiles: []cniplug.NodeFile{
		{Field: "pciBusID", Under: "/sys/bus/pci/devices", Fails: "every ADD fails (no such PCI device)", Fix: "name a PCI address of the node (lspci -D lists them)"},
		{Field: "kernelpath", Fails: "every ADD fails (no such device)", Fix: "name a device path of the node (/sys/class/net/NAME/device points at one)"},
	},
	Config:    []any{(*conf)(nil)},
	Doc:       "host-device",
	PodDevice: &cniplug.PodDevice{ExtraKind: "kind", Gateway: cniplug.GatewayOffNode},
	Doctor:    doctor,
	NodeLinks: []cniplug.NodeLink{{Field: "device", Moved: true}},
}

// doctor says which node device the pod holds.
func doctor(c *cniplug.EndpointCheck) {
	ep := c.Endpoint
	if dev := ep.Extra["device"]; ep.Plugin == plugin && dev != "" {
		c.Pass("device", "the node's %s is in the pod as %s (DEL gives it back under its name)", dev, ep.IfName)
	}
}
