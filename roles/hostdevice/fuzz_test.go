package hostdevice

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// FuzzParseConf: any stdin either parses into a config that names a device
// by something ADD can look up safely (an interface name, a MAC, a clean
// path under /sys/devices/ with no ".." element (a name such as "..0" is
// fine), a PCI or auxiliary address without a slash) or
// fails with code 6 or 7; it never panics.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"host-device","device":"eth1","ipam":{"type":"host-local"}}`,
		`{"hwaddr":"52:54:00:12:34:56","kernelpath":"/sys/devices/pci0000:00/0000:00:05.0"}`,
		`{"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"mlx5_core.sf.2"}}`,
		`{"kernelpath":"/sys/devices/../../etc","pciBusID":"../x","device":"0123456789abcdefg"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin, Conf: &cniplug.NetConf{}}
		_ = json.Unmarshal(stdin, a.Conf)
		c, err := parse(a)
		if err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrDecodingFailure && code != types.ErrInvalidNetworkConfig {
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if c.Device == "" && c.hwaddr == nil && c.KernelPath == "" && c.PCIBusID == "" && c.RuntimeConfig.DeviceID == "" {
			t.Fatalf("accepted a config that names no device: %+v", c)
		}
		if len(c.Device) > 15 || strings.Contains(c.Device, "/") {
			t.Fatalf("accepted device %q", c.Device)
		}
		if c.KernelPath != "" && (!strings.HasPrefix(c.KernelPath, "/sys/devices/") || slices.Contains(strings.Split(c.KernelPath, "/"), "..")) {
			t.Fatalf("accepted kernelpath %q", c.KernelPath)
		}
		for _, v := range []string{c.PCIBusID, c.RuntimeConfig.DeviceID} {
			if strings.Contains(v, "/") || v == ".." {
				t.Fatalf("accepted device address %q", v)
			}
		}
	})
}
