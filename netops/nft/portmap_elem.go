package nft

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// The port mapping types and their encoding as elements of the portmap
// table (portmap.go).

// PortProto is the transport protocol of a port mapping.
type PortProto uint8

// The protocols a port mapping can forward.
const (
	ProtoTCP  PortProto = unix.IPPROTO_TCP
	ProtoUDP  PortProto = unix.IPPROTO_UDP
	ProtoSCTP PortProto = unix.IPPROTO_SCTP
)

// ParsePortProto parses "tcp", "udp" or "sctp" (any case).
func ParsePortProto(s string) (PortProto, bool) {
	switch strings.ToLower(s) {
	case "tcp":
		return ProtoTCP, true
	case "udp":
		return ProtoUDP, true
	case "sctp":
		return ProtoSCTP, true
	}
	return 0, false
}

func (p PortProto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoSCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// PortMapping forwards connections to a host port to a pod address and port.
type PortMapping struct {
	Proto    PortProto
	HostIP   netip.Addr // zero: any local address of PodIP's family
	HostPort uint16
	PodIP    netip.Addr
	PodPort  uint16
}

func (m PortMapping) String() string {
	host := "*"
	if m.HostIP.IsValid() {
		host = m.HostIP.String()
	}
	return fmt.Sprintf("%s:%d/%s -> %s", host, m.HostPort, m.Proto,
		netip.AddrPortFrom(m.PodIP, m.PodPort))
}

// SameKey reports whether m and o are the same map element key: host IP (or
// any), protocol, host port and address family. Two mappings with the same
// key cannot both be in the table.
func (m PortMapping) SameKey(o PortMapping) bool {
	return m.Proto == o.Proto && m.HostPort == o.HostPort && m.HostIP == o.HostIP &&
		m.PodIP.Unmap().Is4() == o.PodIP.Unmap().Is4()
}

// PortMasq selects which connections forwarded to a pod address are
// masqueraded: those from the pod itself (hairpin) and, for IPv4, from the
// node's 127.0.0.0/8 (its replies would not find their way back otherwise);
// with All, every forwarded connection.
type PortMasq struct {
	PodIP netip.Addr
	All   bool
}

// PortMaps is what one attachment forwards. Owner is written into every
// element's comment.
type PortMaps struct {
	Owner    string
	Mappings []PortMapping
	Masq     []PortMasq
}

// Empty reports whether p has no mappings and no masquerade entries.
func (p PortMaps) Empty() bool { return len(p.Mappings) == 0 && len(p.Masq) == 0 }

// pmElem is one element of the portmap table.
type pmElem struct {
	set   string
	key   []byte
	data  []byte // pod IP . port, for the DNAT maps
	owner string
}

// same reports whether e and o have the same set, key and data.
func (e pmElem) same(o pmElem) bool {
	return e.set == o.set && bytes.Equal(e.key, o.key) && bytes.Equal(e.data, o.data)
}

func (e pmElem) id() string { return e.set + "\x00" + string(e.key) }

// portKey and portData are the register layouts of the concatenations: each
// field padded to 4 bytes.
func portKey(hostIP netip.Addr, proto PortProto, port uint16) []byte {
	var k []byte
	if hostIP.IsValid() {
		k = append(k, hostIP.AsSlice()...)
	}
	return append(k, byte(proto), 0, 0, 0, byte(port>>8), byte(port), 0, 0)
}

func portData(ip netip.Addr, port uint16) []byte {
	return append(ip.AsSlice(), byte(port>>8), byte(port), 0, 0)
}

// mappingElem converts a mapping to its element.
func mappingElem(m PortMapping, owner string) (pmElem, error) {
	pod := m.PodIP.Unmap()
	host := m.HostIP.Unmap()
	if !pod.IsValid() {
		return pmElem{}, fmt.Errorf("port mapping %v: invalid pod address", m)
	}
	if m.HostPort == 0 || m.PodPort == 0 {
		return pmElem{}, fmt.Errorf("port mapping %v: port 0", m)
	}
	switch m.Proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
	default:
		return pmElem{}, fmt.Errorf("port mapping %v: unsupported protocol", m)
	}
	if host.IsValid() && host.Is4() != pod.Is4() {
		return pmElem{}, fmt.Errorf("port mapping %v: host and pod addresses of different families", m)
	}
	if host.IsValid() && host.IsUnspecified() {
		host = netip.Addr{}
	}
	e := pmElem{key: portKey(host, m.Proto, m.HostPort), data: portData(pod, m.PodPort), owner: owner}
	switch {
	case host.IsValid() && pod.Is4():
		e.set = pmSetHostIP4
	case host.IsValid():
		e.set = pmSetHostIP6
	case pod.Is4():
		e.set = pmSetPort4
	default:
		e.set = pmSetPort6
	}
	return e, nil
}

// masqElem is the element of a masquerade entry: pod IP . pod IP in snat4
// or snat6, or the pod IP in masqall4 or masqall6.
func masqElem(m PortMasq, owner string) (pmElem, error) {
	pod := m.PodIP.Unmap()
	if !pod.IsValid() {
		return pmElem{}, fmt.Errorf("masquerade: invalid pod address %v", m.PodIP)
	}
	switch {
	case m.All && pod.Is4():
		return pmElem{set: pmSetAll4, key: pod.AsSlice(), owner: owner}, nil
	case m.All:
		return pmElem{set: pmSetAll6, key: pod.AsSlice(), owner: owner}, nil
	case pod.Is4():
		return pmElem{set: pmSetSnat4, key: append(pod.AsSlice(), pod.AsSlice()...), owner: owner}, nil
	}
	return pmElem{set: pmSetSnat6, key: append(pod.AsSlice(), pod.AsSlice()...), owner: owner}, nil
}

// elems converts p to its elements, rejecting two with the same key.
func (p PortMaps) elems() ([]pmElem, error) {
	if len(p.Owner) > pmMaxOwner {
		return nil, fmt.Errorf("port map owner %q: longer than %d bytes", p.Owner, pmMaxOwner)
	}
	var out []pmElem
	seen := map[string]bool{}
	add := func(e pmElem, what fmt.Stringer) error {
		if seen[e.id()] {
			return fmt.Errorf("%v: the same key twice", what)
		}
		seen[e.id()] = true
		out = append(out, e)
		return nil
	}
	for _, m := range p.Mappings {
		e, err := mappingElem(m, p.Owner)
		if err == nil {
			err = add(e, m)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, m := range p.Masq {
		e, err := masqElem(m, p.Owner)
		if err == nil {
			err = add(e, m.PodIP)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decode fills the mapping or masquerade entry of e into p.
func (e pmElem) decodeInto(p *PortMaps) bool {
	switch e.set {
	case pmSetAll4, pmSetAll6, pmSetSnat4, pmSetSnat6:
		k := e.key
		if e.set == pmSetSnat4 || e.set == pmSetSnat6 {
			k = k[:len(k)/2]
		}
		ip, ok := netip.AddrFromSlice(k)
		if !ok {
			return false
		}
		p.Masq = append(p.Masq, PortMasq{PodIP: ip, All: e.set == pmSetAll4 || e.set == pmSetAll6})
		return true
	}
	ipLen := map[string]int{pmSetHostIP4: 4, pmSetHostIP6: 16, pmSetPort4: 0, pmSetPort6: 0}[e.set]
	podLen := 4
	if e.set == pmSetHostIP6 || e.set == pmSetPort6 {
		podLen = 16
	}
	if len(e.key) != ipLen+8 || len(e.data) != podLen+4 {
		return false
	}
	m := PortMapping{
		Proto:    PortProto(e.key[ipLen]),
		HostPort: uint16(e.key[ipLen+4])<<8 | uint16(e.key[ipLen+5]),
		PodPort:  uint16(e.data[podLen])<<8 | uint16(e.data[podLen+1]),
	}
	m.PodIP, _ = netip.AddrFromSlice(e.data[:podLen])
	if ipLen > 0 {
		m.HostIP, _ = netip.AddrFromSlice(e.key[:ipLen])
	}
	p.Mappings = append(p.Mappings, m)
	return true
}

// groupByOwner turns elements into one PortMaps per owner, in the order the
// owners first appear.
func groupByOwner(elems []pmElem) []PortMaps {
	idx := map[string]int{}
	var out []PortMaps
	for _, e := range elems {
		i, ok := idx[e.owner]
		if !ok {
			i = len(out)
			idx[e.owner] = i
			out = append(out, PortMaps{Owner: e.owner})
		}
		e.decodeInto(&out[i])
	}
	return out
}
