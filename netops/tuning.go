package netops

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// LinkSettings are the interface attributes the tuning role changes and
// restores.
type LinkSettings struct {
	Name     string
	Index    int
	MAC      net.HardwareAddr
	MTU      int
	Promisc  bool // promiscuous mode requested (IFF_PROMISC)
	Allmulti bool // all-multicast mode requested (IFF_ALLMULTI)
	TxQLen   int  // transmit queue length
}

// LinkSettings returns the tunable attributes of the interface called name.
// The error wraps ErrNotFound when there is none.
func (h *Handle) LinkSettings(name string) (LinkSettings, error) {
	l, m, err := h.linkOf("get link settings", name)
	if err != nil {
		return LinkSettings{}, err
	}
	txqlen, err := attrOf(m[unix.SizeofIfInfomsg:], unix.IFLA_TXQLEN)
	if err != nil {
		return LinkSettings{}, fmt.Errorf("get link %q in %s: parse RTM_NEWLINK: %w", name, h.where(), err)
	}
	return LinkSettings{
		Name: l.Name, Index: l.Index, MAC: l.MAC, MTU: l.MTU, Promisc: l.Promisc,
		Allmulti: nl.DeserializeIfInfomsg(m).Flags&unix.IFF_ALLMULTI != 0,
		TxQLen:   attrInt(txqlen, 0),
	}, nil
}

// SetAllmulticast turns all-multicast mode of the interface on or off.
func (h *Handle) SetAllmulticast(name string, on bool) error {
	var flags uint32
	if on {
		flags = unix.IFF_ALLMULTI
	}
	return h.setLink(fmt.Sprintf("set allmulticast %v", on), name, unix.IFF_ALLMULTI, flags)
}

// SetTxQLen sets the interface's transmit queue length.
func (h *Handle) SetTxQLen(name string, qlen int) error {
	if qlen < 0 || int64(qlen) > int64(^uint32(0)) {
		return fmt.Errorf("set txqueuelen of %q: invalid length %d", name, qlen)
	}
	return h.setLink(fmt.Sprintf("set txqueuelen %d", qlen), name, 0, 0,
		nl.NewRtAttr(unix.IFLA_TXQLEN, nl.Uint32Attr(uint32(qlen))))
}

// Sysctls reads several sysctl keys inside the Handle's namespace with one
// switch into it, in order, without the trailing newlines. An error names the
// key and wraps ErrNotFound when the key does not exist.
func (h *Handle) Sysctls(keys ...string) ([]string, error) {
	paths := make([]string, len(keys))
	for i, k := range keys {
		p, err := sysctlPath(k)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	out := make([]string, len(keys))
	err := h.inNS(func() error {
		for i, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read sysctl %s in %s: %w", keys[i], h.where(), fsError(err))
			}
			out[i] = strings.TrimSuffix(string(b), "\n")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
