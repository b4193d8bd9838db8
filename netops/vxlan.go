package netops

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultVXLANPort is the UDP port the kernel uses for a VXLAN device created
// without one (the Linux default, also flannel's).
const DefaultVXLANPort = 8472

// VXLANOpts describes a VXLAN device for EnsureVXLAN.
type VXLANOpts struct {
	Name  string
	VNI   int        // 0..16777215
	Port  int        // UDP destination port; 0 = DefaultVXLANPort
	Local netip.Addr // source address of the encapsulated packets; optional
	Dev   string     // underlay interface; "" = none
	MTU   int        // 0 = the kernel's choice (the underlay's MTU minus the overhead)
	// MAC is the device's hardware address (the VTEP MAC). A new device gets
	// it; an existing device is changed to it. nil keeps an existing device's
	// MAC (also across a re-creation) and lets the kernel pick one for a new
	// device.
	MAC      net.HardwareAddr
	Learning bool // learn remote MACs from traffic (flannel turns it off)
	GBP      bool // VXLAN group based policy extension
	// TxChecksumOff turns tx checksum offload off on the device (the kernel
	// bug where NATed VXLAN packets leave with a bad UDP checksum). false
	// leaves the setting alone.
	TxChecksumOff bool
}

// VXLAN is a VXLAN device as the kernel reports it.
type VXLAN struct {
	Link
	VNI      int
	Port     int
	Local    netip.Addr
	DevIndex int // ifindex of the underlay interface; 0 = none
	Learning bool
	GBP      bool
}

// VXLANByName returns the VXLAN device called name. The error wraps
// ErrNotFound when there is none and ErrExists when name is another kind of
// link.
func (h *Handle) VXLANByName(name string) (VXLAN, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return VXLAN{}, err
	}
	if l.Kind != "vxlan" {
		return VXLAN{}, fmt.Errorf("get vxlan %q in %s: the interface is a %q, not a vxlan: %w", name, h.where(), l.Kind, ErrExists)
	}
	nlink, err := h.nlh.LinkByIndex(l.Index)
	if err != nil {
		return VXLAN{}, fmt.Errorf("get vxlan %q in %s: %w", name, h.where(), classify(err))
	}
	vx, ok := nlink.(*netlink.Vxlan)
	if !ok {
		return VXLAN{}, fmt.Errorf("get vxlan %q in %s: the interface changed under us: %w", name, h.where(), ErrNotFound)
	}
	v := VXLAN{
		Link:     l,
		VNI:      vx.VxlanId,
		Port:     vx.Port,
		Local:    fromIP(vx.SrcAddr),
		DevIndex: vx.VtepDevIndex,
		Learning: vx.Learning,
		GBP:      vx.GBP,
	}
	if v.Port == 0 {
		v.Port = DefaultVXLANPort
	}
	return v, nil
}

// EnsureVXLAN makes sure the VXLAN device o describes exists and is up. A
// device of that name whose VNI, port, local address, underlay interface,
// learning or GBP setting differ is deleted and created again (the kernel
// cannot change them in place); its MAC is kept unless o.MAC says otherwise.
// MTU and MAC are changed in place. created reports whether the device is
// new, so that whatever was programmed on the old one must be programmed
// again. A link of that name that is not a VXLAN device is an error wrapping
// ErrExists.
func (h *Handle) EnsureVXLAN(o VXLANOpts) (v VXLAN, created bool, err error) {
	if err := checkIfName("ensure vxlan", o.Name); err != nil {
		return VXLAN{}, false, err
	}
	if o.VNI < 0 || o.VNI > 1<<24-1 {
		return VXLAN{}, false, fmt.Errorf("ensure vxlan %q: VNI %d is not in 0..16777215", o.Name, o.VNI)
	}
	if o.Port < 0 || o.Port > 65535 {
		return VXLAN{}, false, fmt.Errorf("ensure vxlan %q: port %d is not in 0..65535", o.Name, o.Port)
	}
	if o.MAC != nil && len(o.MAC) != 6 {
		return VXLAN{}, false, fmt.Errorf("ensure vxlan %q: %q is not an Ethernet address", o.Name, o.MAC)
	}
	port := o.Port
	if port == 0 {
		port = DefaultVXLANPort
	}
	devIndex := 0
	if o.Dev != "" {
		if devIndex, _, err = h.linkIndex(o.Dev); err != nil {
			return VXLAN{}, false, fmt.Errorf("ensure vxlan %q: underlay interface: %w", o.Name, err)
		}
	}

	mac := o.MAC
	cur, err := h.VXLANByName(o.Name)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return VXLAN{}, false, fmt.Errorf("ensure vxlan: %w", err)
	case cur.VNI == o.VNI && cur.Port == port && cur.Local == o.Local.Unmap() &&
		cur.DevIndex == devIndex && cur.Learning == o.Learning && cur.GBP == o.GBP:
		v, err := h.fixVXLAN(cur, o)
		return v, false, err
	default:
		// Settings the kernel cannot change: build the device again.
		if mac == nil {
			mac = cur.MAC
		}
		if err := h.DeleteLink(o.Name); err != nil {
			return VXLAN{}, false, fmt.Errorf("ensure vxlan: re-create %q with other settings: %w", o.Name, err)
		}
	}

	attrs := netlink.NewLinkAttrs()
	attrs.Name = o.Name
	attrs.MTU = o.MTU
	attrs.Flags = net.FlagUp
	if mac != nil {
		attrs.HardwareAddr = mac
	}
	nv := &netlink.Vxlan{
		LinkAttrs:    attrs,
		VxlanId:      o.VNI,
		VtepDevIndex: devIndex,
		SrcAddr:      toIP(o.Local),
		Learning:     o.Learning,
		GBP:          o.GBP,
		Port:         port,
	}
	if err := h.nlh.LinkAdd(nv); err != nil {
		return VXLAN{}, false, fmt.Errorf("create vxlan %q (vni %d, port %d, local %v, dev %q) in %s: %w",
			o.Name, o.VNI, port, o.Local, o.Dev, h.where(), kindErr("vxlan", err))
	}
	delete(h.ifindex, o.Name)
	if o.TxChecksumOff {
		if err := h.SetTxChecksum(o.Name, false); err != nil {
			return VXLAN{}, true, fmt.Errorf("ensure vxlan: %w", err)
		}
	}
	v, err = h.VXLANByName(o.Name)
	if err != nil {
		return VXLAN{}, true, fmt.Errorf("ensure vxlan: %w", err)
	}
	return v, true, nil
}

// fixVXLAN brings MTU, MAC, up state and checksum offload of an existing
// device with the right settings to what o asks.
func (h *Handle) fixVXLAN(v VXLAN, o VXLANOpts) (VXLAN, error) {
	if o.MTU > 0 && v.MTU != o.MTU {
		if err := h.SetMTU(o.Name, o.MTU); err != nil {
			return VXLAN{}, fmt.Errorf("ensure vxlan: %w", err)
		}
		v.MTU = o.MTU
	}
	if o.MAC != nil && !bytes.Equal(v.MAC, o.MAC) {
		if err := h.SetMAC(o.Name, o.MAC); err != nil {
			return VXLAN{}, fmt.Errorf("ensure vxlan: %w", err)
		}
		v.MAC = append(net.HardwareAddr(nil), o.MAC...)
	}
	if !v.Up {
		if err := h.SetLinkUp(o.Name); err != nil {
			return VXLAN{}, fmt.Errorf("ensure vxlan: %w", err)
		}
		v.Up = true
	}
	if o.TxChecksumOff {
		on, err := h.TxChecksum(o.Name)
		if err != nil {
			return VXLAN{}, fmt.Errorf("ensure vxlan: %w", err)
		}
		if on {
			if err := h.SetTxChecksum(o.Name, false); err != nil {
				return VXLAN{}, fmt.Errorf("ensure vxlan: %w", err)
			}
		}
	}
	return v, nil
}

// ethtool ioctl commands (linux/ethtool.h): the legacy get/set of tx
// checksumming, which every kernel still maps onto the device's features.
const (
	ethtoolGTxCsum = 0x16
	ethtoolSTxCsum = 0x17
)

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ethtoolIfreq is struct ifreq with ifr_data.
type ethtoolIfreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// TxChecksum reports whether tx checksum offload is on for the interface
// (`ethtool -k NAME`, tx-checksumming).
func (h *Handle) TxChecksum(name string) (bool, error) {
	v, err := h.ethtool(name, ethtoolGTxCsum, 0)
	if err != nil {
		return false, fmt.Errorf("get tx checksumming of %q in %s: %w", name, h.where(), err)
	}
	return v != 0, nil
}

// SetTxChecksum turns tx checksum offload of the interface on or off
// (`ethtool -K NAME tx on|off`), with the ethtool ioctl.
func (h *Handle) SetTxChecksum(name string, on bool) error {
	var v uint32
	if on {
		v = 1
	}
	if _, err := h.ethtool(name, ethtoolSTxCsum, v); err != nil {
		return fmt.Errorf("set tx checksumming of %q to %v in %s: %w", name, on, h.where(), err)
	}
	return nil
}

// ethtool runs one ethtool_value ioctl on the interface, through a socket
// opened inside the Handle's namespace (the ioctl finds the interface in the
// socket's namespace).
func (h *Handle) ethtool(name string, cmd, data uint32) (uint32, error) {
	if err := checkIfName("ethtool", name); err != nil {
		return 0, err
	}
	var fd int
	err := h.inNS(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("open ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	val := &ethtoolValue{cmd: cmd, data: data}
	ifr := &ethtoolIfreq{data: unsafe.Pointer(val)}
	copy(ifr.name[:], name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return 0, classify(errno)
	}
	return val.data, nil
}
