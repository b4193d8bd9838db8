package hostdevice

import (
	"net"
	"path"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
)

// conf is a host-device network, field names as in the reference plugin.
type conf struct {
	Device        string `json:"device"`
	HWAddr        string `json:"hwaddr"`
	KernelPath    string `json:"kernelpath"`
	PCIBusID      string `json:"pciBusID"`
	RuntimeConfig struct {
		DeviceID string `json:"deviceID"`
	} `json:"runtimeConfig"`
	DNS types.DNS `json:"dns"`
	// DataDir is where the endpoint records are kept (default: see store.Dir).
	DataDir string `json:"dataDir,omitempty"`

	hwaddr net.HardwareAddr
}

// parse decodes stdin and checks the fields that name the device; which
// device they name is found on ADD (find).
func parse(a *cniplug.Args) (*conf, error) {
	var c conf
	if err := cniplug.DecodeConf("host-device config", a.StdinData, &c); err != nil {
		return nil, err
	}
	if c.Device == "" && c.HWAddr == "" && c.KernelPath == "" && c.PCIBusID == "" && c.RuntimeConfig.DeviceID == "" {
		return nil, cniplug.ConfError("device", "missing: name the node's device by \"device\" (its name), \"hwaddr\", \"kernelpath\" or \"pciBusID\" (or let the runtime pass runtimeConfig.deviceID)")
	}
	if c.Device != "" {
		if err := utils.ValidateInterfaceName(c.Device); err != nil {
			return nil, cniplug.ConfError("device", "%q is not a valid interface name: %s", c.Device, err.Msg)
		}
	}
	if c.HWAddr != "" {
		mac, err := net.ParseMAC(c.HWAddr)
		if err != nil {
			return nil, cniplug.ConfError("hwaddr", "%q is not a MAC address (want e.g. 52:54:00:12:34:56): %v", c.HWAddr, err)
		}
		c.hwaddr = mac
	}
	if p := c.KernelPath; p != "" && (!strings.HasPrefix(p, "/sys/devices/") || path.Clean(p) != p) {
		return nil, cniplug.ConfError("kernelpath", "%q must be a clean absolute path under /sys/devices/ (e.g. /sys/devices/pci0000:00/0000:00:05.0)", p)
	}
	for field, v := range map[string]string{"pciBusID": c.PCIBusID, "runtimeConfig.deviceID": c.RuntimeConfig.DeviceID} {
		if v != "" && (strings.ContainsAny(v, "/\x00") || v == "." || v == "..") {
			return nil, cniplug.ConfError(field, "%q is not a device address (want e.g. 0000:00:05.0)", v)
		}
	}
	return &c, nil
}
