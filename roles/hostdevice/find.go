package hostdevice

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// sysRoot is where sysfs is mounted (tests point it at a tree of their own).
var sysRoot = "/sys"

// userspaceDrivers are the PCI drivers that leave a device to a userspace
// (DPDK) process: it has no netdev to move.
var userspaceDrivers = []string{"vfio-pci", "uio_pci_generic", "igb_uio"}

// target is the device a config names: the field that names it and its
// value, as the reference picks them: "device", else "hwaddr", else
// "kernelpath", else the PCI address ("pciBusID", or runtimeConfig.deviceID
// when that is a PCI device), else an auxiliary device or a network
// interface of the node (runtimeConfig.deviceID).
type target struct {
	field, value string
	aux          bool // value is an auxiliary device
	netdev       bool // value is the name of a network interface (cnibox)
}

// targetOf returns the device c names. A deviceID that is neither a PCI nor
// an auxiliary device is taken as an interface name, as a device plugin
// that hands out netdevs (veths, macvtaps, ...) allocates them; one that
// cannot be an interface name either is code 7.
func targetOf(c *conf) (target, error) {
	id := c.RuntimeConfig.DeviceID
	var byID *target
	if id != "" {
		switch {
		case exists(sysRoot, "bus/pci/devices", id):
			byID = &target{field: "runtimeConfig.deviceID", value: id}
		case exists(sysRoot, "bus/auxiliary/devices", id):
			byID = &target{field: "runtimeConfig.deviceID", value: id, aux: true}
		case utils.ValidateInterfaceName(id) == nil:
			byID = &target{field: "runtimeConfig.deviceID", value: id, netdev: true}
		default:
			return target{}, cniplug.ConfError("runtimeConfig.deviceID", "%q is neither a PCI device (/sys/bus/pci/devices), an auxiliary device (/sys/bus/auxiliary/devices) nor an interface name: check the device plugin that allocated it", id)
		}
	}
	switch {
	case c.Device != "":
		return target{field: "device", value: c.Device}, nil
	case c.HWAddr != "":
		return target{field: "hwaddr", value: c.hwaddr.String()}, nil
	case c.KernelPath != "":
		return target{field: "kernelpath", value: c.KernelPath}, nil
	case byID != nil:
		return *byID, nil
	}
	return target{field: "pciBusID", value: c.PCIBusID}, nil
}

// pci reports whether t is a PCI address.
func (t target) pci() bool {
	return !t.aux && !t.netdev && (t.field == "pciBusID" || t.field == "runtimeConfig.deviceID")
}

// dpdk reports whether t is a PCI device bound to a userspace driver.
func (t target) dpdk() (bool, error) {
	if !t.pci() {
		return false, nil
	}
	drv, err := filepath.EvalSymlinks(filepath.Join(sysRoot, "bus/pci/devices", t.value, "driver"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // no driver bound: no netdev either, which find says
	}
	if err != nil {
		return false, cniplug.Errorf(types.ErrIOFailure, "driver of PCI device %s: %w", t.value, err)
	}
	return slices.Contains(userspaceDrivers, filepath.Base(drv)), nil
}

// find returns the device t names in the node's namespace. A device that
// is not there wraps netops.ErrNotFound.
func find(host *netops.Handle, t target, c *conf) (netops.Link, error) {
	switch {
	case t.field == "device" || t.netdev:
		return host.LinkByName(t.value)
	case t.field == "hwaddr":
		return host.LinkByMAC(c.hwaddr)
	}
	var dirs []string
	switch {
	case t.field == "kernelpath":
		dirs = []string{filepath.Join(sysRoot, strings.TrimPrefix(t.value, "/sys"), "net")}
	case t.aux:
		dirs = []string{filepath.Join(sysRoot, "bus/auxiliary/devices", t.value, "net")}
	default:
		pci := filepath.Join(sysRoot, "bus/pci/devices", t.value)
		virtio, _ := filepath.Glob(filepath.Join(pci, "virtio*", "net"))
		dirs = append([]string{filepath.Join(pci, "net")}, virtio...)
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) == 0 {
			continue
		}
		return host.LinkByName(ents[0].Name())
	}
	return netops.Link{}, fmt.Errorf("no network device under %s: %w", dirs[0], netops.ErrNotFound)
}

// exists reports whether the sysfs entry root/dir/name is there.
func exists(root, dir, name string) bool {
	_, err := os.Stat(filepath.Join(root, dir, name))
	return err == nil
}

// deviceOnNode returns what the device t names is on the node. One that is
// not there is code 7, naming the attachment that holds it when one does.
func deviceOnNode(a *cniplug.Args, c *conf, host *netops.Handle, t target) (netops.DeviceState, error) {
	l, err := find(host, t, c)
	if errors.Is(err, netops.ErrNotFound) {
		if h, herr := holder(a, c, t, ""); herr != nil || h != nil {
			return netops.DeviceState{}, cmpErr(herr, func() error { return inUse(t, h) })
		}
		if t.netdev {
			return netops.DeviceState{}, cniplug.ConfError(t.field, "%q is neither a PCI device (/sys/bus/pci/devices), an auxiliary device (/sys/bus/auxiliary/devices) nor an interface of the node (%v): check the device plugin that allocated it", t.value, err)
		}
		return netops.DeviceState{}, cniplug.ConfError(t.field, "%q: no such device on the node (%v): fix %q", t.value, err, t.field)
	}
	if err != nil {
		return netops.DeviceState{}, cniplug.Errorf(types.ErrIOFailure, "find the device %s %q: %w", t.field, t.value, err)
	}
	st, err := host.DeviceStateOf(l.Name)
	if err != nil {
		return netops.DeviceState{}, cniplug.Errorf(types.ErrIOFailure, "read the state of %q: %w", l.Name, err)
	}
	return st, nil
}

// cmpErr returns err, or when it is nil, what other makes.
func cmpErr(err error, other func() error) error {
	if err != nil {
		return err
	}
	return other()
}
