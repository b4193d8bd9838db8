package multi

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/atomicfile"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// Device information (the NPWG device-info specification): a device plugin
// writes it for each device it allocates under devinfo/dp; Multus copies it
// for the attachment under devinfo/cni and passes that path to the delegate
// as the CNIDeviceInfoFile capability (a delegate may write the file
// itself); network-status carries it as "device-info".

// devInfoDir is the specification's directory.
const devInfoDir = "/var/run/k8s.cni.cncf.io/devinfo"

// dpDevInfoPath is where a device plugin leaves a device's information.
func dpDevInfoPath(resource, id string) string {
	return filepath.Join(devInfoDir, "dp", strings.ReplaceAll(resource, "/", "-")+"-"+strings.ReplaceAll(id, "/", "-")+"-device.json")
}

// cniDevInfoPath is the attachment's device information file.
func cniDevInfoPath(network, containerID, ifname string) string {
	return filepath.Join(devInfoDir, "cni", strings.ReplaceAll(network+"-"+containerID+"_"+ifname, "/", "-"))
}

// prepareDevInfo gives every delegate with a device its CNIDeviceInfoFile
// (runtimeConfig, for the plugins that declare the capability) and copies
// the device plugin's information there when it has written some.
func prepareDevInfo(a *cniplug.Args, c *multiConf) error {
	for _, d := range c.Delegates {
		if d.DeviceID == "" {
			continue
		}
		d.DevInfoFile = cniDevInfoPath(d.statusName(), a.ContainerID, d.IfName)
		if err := bakeRuntimeConfig(d, map[string]any{"CNIDeviceInfoFile": d.DevInfoFile}, false); err != nil {
			return err
		}
		if d.ResourceName == "" {
			continue
		}
		b, err := os.ReadFile(dpDevInfoPath(d.ResourceName, d.DeviceID))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				delegate.Log(a, "multi: device info of %s: %v (ignored)", d.describe(), err)
			}
			continue
		}
		if err = os.MkdirAll(filepath.Dir(d.DevInfoFile), 0o755); err == nil {
			// atomically (a reader never sees half of it), and never through
			// a symlink: the name comes from the NAD's and the pod's names.
			err = atomicfile.WriteFile(d.DevInfoFile, b, 0o600)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			delegate.Log(a, "multi: device info of %s: %v (ignored)", d.describe(), err)
		}
	}
	return nil
}

// readDevInfo returns the device information of each delegate, if its file
// exists and holds JSON.
func readDevInfo(c *multiConf) []json.RawMessage {
	out := make([]json.RawMessage, len(c.Delegates))
	for i, d := range c.Delegates {
		if d.DevInfoFile == "" {
			continue
		}
		if b, err := os.ReadFile(d.DevInfoFile); err == nil && json.Valid(b) {
			out[i] = json.RawMessage(b)
		}
	}
	return out
}

// removeDevInfo deletes the attachment's device information files (DEL):
// those of its container and the delegates' interfaces.
func removeDevInfo(a *cniplug.Args, ds []*multiDelegate) {
	for _, d := range ds {
		pattern := filepath.Join(devInfoDir, "cni", "*-"+strings.ReplaceAll(a.ContainerID+"_"+d.IfName, "/", "-"))
		files, _ := filepath.Glob(pattern)
		for _, p := range files {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				delegate.Log(a, "multi DEL: remove %s: %v (ignored)", p, err)
			}
		}
	}
}
