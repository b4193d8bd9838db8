package netops

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cnibox/cnibox/netops/internal/kerr"
	"github.com/cnibox/cnibox/netops/internal/nsthread"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tunDevice is the character device taps are made through.
const tunDevice = "/dev/net/tun"

// TapOpts describes a persistent tap device for EnsureTap.
type TapOpts struct {
	Name string
	MTU  int              // 0 = the kernel's (1500)
	MAC  net.HardwareAddr // nil = the kernel's random one
	// MultiQueue makes a multi-queue tap (IFF_MULTI_QUEUE): a VM's vhost
	// threads each attach a queue of their own.
	MultiQueue bool
	// Owner and Group are the user and group that may attach to the tap
	// without CAP_NET_ADMIN; nil sets none.
	Owner, Group *uint32
	// Master is a bridge of the Handle's namespace the tap becomes a port
	// of; "" = none.
	Master string
	// Label is the SELinux context the kernel gives the tap (that of the
	// thread that creates it); "" = the caller's. It needs SELinux.
	Label string
}

// Tap is what EnsureTap and TapByName report about a tun/tap device.
type Tap struct {
	Link
	// IsTap says the device is a tap (layer 2), not a tun; meaningful only
	// when Kind is "tun", which the kernel reports for both.
	IsTap      bool
	MultiQueue bool
	Persist    bool
	// Owner and Group are nil when the device has none.
	Owner, Group *uint32
}

// EnsureTap makes sure the tap o describes exists in the Handle's namespace.
// A new one is made as `ip tuntap add mode tap` makes it (no packet
// information header, persistent, exclusive), then given o's MTU and MAC and
// put on o.Master, down: the caller sets it up once its addresses are on.
// The tap is made by a thread inside the namespace (the kernel puts it in
// the namespace of whoever opens /dev/net/tun), so no name of another
// namespace can clash with it. An existing tap of that name is kept as it
// is; any other device of that name is an error that wraps ErrExists. A
// kernel without TUN/TAP (no /dev/net/tun, no tun module) answers with an
// error that wraps ErrNotSupported. DeleteLink removes it.
func (h *Handle) EnsureTap(o TapOpts) (Tap, error) {
	what := fmt.Sprintf("ensure tap %q in %s", o.Name, h.where())
	if err := checkIfName(what, o.Name); err != nil {
		return Tap{}, err
	}
	if t, err := h.TapByName(o.Name); err == nil {
		if t.Kind != "tun" || !t.IsTap {
			return Tap{}, fmt.Errorf("%s: interface %q already exists (kind %q): %w", what, o.Name, t.Kind, ErrExists)
		}
		return t, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Tap{}, fmt.Errorf("%s: %w", what, err)
	}
	masterIdx := 0
	if o.Master != "" {
		m, err := h.LinkByName(o.Master)
		if err != nil {
			return Tap{}, fmt.Errorf("%s: master: %w", what, err)
		}
		masterIdx = m.Index
	}
	if err := h.makeTap(o); err != nil {
		return Tap{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := h.setUpTap(o, masterIdx); err != nil {
		_ = h.DeleteLink(o.Name)
		return Tap{}, fmt.Errorf("%s: %w", what, err)
	}
	t, err := h.TapByName(o.Name)
	if err != nil {
		return Tap{}, fmt.Errorf("%s: %w", what, err)
	}
	return t, nil
}

// makeTap creates the persistent tap o.Name with its owner and group on a
// thread inside the Handle's namespace (one that is thrown away after, when
// it took on o.Label).
func (h *Handle) makeTap(o TapOpts) error {
	enter := func() error {
		if h.path == "" {
			return nil
		}
		if err := netns.Set(h.ns); err != nil {
			return fmt.Errorf("enter %s: %w", h.where(), err)
		}
		return nil
	}
	create := func() error { return createTap(o) }
	if o.Label == "" {
		return nsthread.Do(enter, create)
	}
	return nsthread.Once(func() error {
		if err := enter(); err != nil {
			return err
		}
		// The kernel labels a tap after the thread that creates it: this
		// thread takes the label and is thrown away after.
		if err := os.WriteFile("/proc/thread-self/attr/current", []byte(o.Label), 0); err != nil {
			return fmt.Errorf("take the SELinux context %q: %w", o.Label, err)
		}
		return create()
	})
}

// createTap opens /dev/net/tun and makes it the persistent tap o.Name with
// o's owner and group, in the namespace of the calling thread.
func createTap(o TapOpts) error {
	fd, err := unix.Open(tunDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
		f, _ := LinkKindFeature("tun")
		return kerr.Wrap(ErrNotSupported, fmt.Errorf("open %s: %w (%w: the node's kernel has no %s)", tunDevice, err, unix.EOPNOTSUPP, f))
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", tunDevice, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(o.Name)
	if err != nil {
		return err
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_TUN_EXCL)
	if o.MultiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("TUNSETIFF: %w", classify(err))
	}
	for _, id := range []struct {
		req uint
		v   *uint32
	}{{unix.TUNSETOWNER, o.Owner}, {unix.TUNSETGROUP, o.Group}} {
		if id.v == nil {
			continue
		}
		if err := unix.IoctlSetInt(fd, id.req, int(*id.v)); err != nil {
			return fmt.Errorf("set owner/group %d: %w", *id.v, err)
		}
	}
	// Without persist the tap would go with this file descriptor.
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", err)
	}
	return nil
}

// setUpTap gives a new tap o's MTU and MAC and puts it on the master.
func (h *Handle) setUpTap(o TapOpts, masterIdx int) error {
	if o.MTU > 0 {
		if err := h.SetMTU(o.Name, o.MTU); err != nil {
			return err
		}
	}
	if o.MAC != nil {
		if err := h.SetMAC(o.Name, o.MAC); err != nil {
			return err
		}
	}
	if masterIdx == 0 {
		return nil
	}
	return h.withLinkIndex(o.Name, func(idx int) error {
		if err := h.nlh.LinkSetMasterByIndex(indexOnly(idx), masterIdx); err != nil {
			return fmt.Errorf("put %q on %q: %w", o.Name, o.Master, classify(err))
		}
		return nil
	})
}

// TapByName returns the interface called name, with its tun/tap attributes
// when it is a tun or tap device. The error wraps ErrNotFound when there is
// none.
func (h *Handle) TapByName(name string) (Tap, error) {
	l, raw, err := h.linkOf("get link", name)
	if err != nil {
		return Tap{}, err
	}
	t := Tap{Link: l}
	if l.Kind != "tun" {
		return t, nil
	}
	info, err := attrOf(raw[unix.SizeofIfInfomsg:], unix.IFLA_LINKINFO)
	if err == nil {
		info, err = attrOf(info, nl.IFLA_INFO_DATA)
	}
	if err == nil {
		err = eachAttr(info, func(typ uint16, v []byte) {
			switch typ {
			case nl.IFLA_TUN_TYPE:
				t.IsTap = len(v) > 0 && v[0] == unix.IFF_TAP
			case nl.IFLA_TUN_MULTI_QUEUE:
				t.MultiQueue = len(v) > 0 && v[0] != 0
			case nl.IFLA_TUN_PERSIST:
				t.Persist = len(v) > 0 && v[0] != 0
			case nl.IFLA_TUN_OWNER:
				t.Owner = u32Ptr(v)
			case nl.IFLA_TUN_GROUP:
				t.Group = u32Ptr(v)
			}
		})
	}
	if err != nil {
		return Tap{}, fmt.Errorf("get link %q in %s: parse tun data: %w", name, h.where(), err)
	}
	return t, nil
}

// u32Ptr decodes a u32 attribute value (nil when short).
func u32Ptr(v []byte) *uint32 {
	if len(v) < 4 {
		return nil
	}
	x := nl.NativeEndian().Uint32(v)
	return &x
}
