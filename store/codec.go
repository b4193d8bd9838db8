package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// A reservation value is a fixed header and four length-prefixed strings:
//
//	[0]     format version (resFormat)
//	[1]     prefix length of the subnet (noBits when unknown)
//	[2:10]  created, Unix nanoseconds, big endian (0 when unknown)
//	then    uvarint length + bytes of: container ID, ifname, pod, boot ID
//
// The address is the key and the network the bucket, so neither is repeated.
const (
	resFormat byte = 1
	noBits    byte = 0xff
	resHeader      = 10
)

var errShort = errors.New("record truncated")

func encodeReservation(r Reservation) []byte {
	strs := [...]string{r.ContainerID, r.IfName, r.Pod, r.BootID}
	n := resHeader
	for _, s := range strs {
		n += binary.MaxVarintLen64 + len(s)
	}
	b := make([]byte, resHeader, n)
	b[0] = resFormat
	b[1] = noBits
	if r.Subnet.IsValid() {
		b[1] = byte(r.Subnet.Bits())
	}
	if !r.Created.IsZero() {
		binary.BigEndian.PutUint64(b[2:10], uint64(r.Created.UnixNano()))
	}
	for _, s := range strs {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeReservation(addr netip.Addr, network string, b []byte) (Reservation, error) {
	r := Reservation{Addr: addr, Network: network}
	if len(b) < resHeader {
		return r, errShort
	}
	if b[0] != resFormat {
		return r, fmt.Errorf("unknown record format %d (written by a newer cnibox?)", b[0])
	}
	if b[1] != noBits {
		p, err := addr.Prefix(int(b[1]))
		if err != nil {
			return r, fmt.Errorf("prefix length %d: %w", b[1], err)
		}
		r.Subnet = p
	}
	if ns := int64(binary.BigEndian.Uint64(b[2:10])); ns != 0 {
		r.Created = time.Unix(0, ns)
	}
	rest := b[resHeader:]
	for _, dst := range [...]*string{&r.ContainerID, &r.IfName, &r.Pod, &r.BootID} {
		l, n := binary.Uvarint(rest)
		if n <= 0 || uint64(len(rest)-n) < l {
			return r, errShort
		}
		*dst = string(rest[n : n+int(l)])
		rest = rest[n+int(l):]
	}
	return r, nil
}

// addrKey is the key of an address: its 4 or 16 bytes.
func addrKey(a netip.Addr) []byte { return a.AsSlice() }

// keyAddr is the address of a key (invalid if the key is not 4 or 16 bytes).
func keyAddr(k []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(k)
	return a
}

// encodeAddrs packs addresses as [length byte][bytes]...
func encodeAddrs(addrs []netip.Addr) []byte {
	var b []byte
	for _, a := range addrs {
		s := a.AsSlice()
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeAddrs(b []byte) ([]netip.Addr, error) {
	var out []netip.Addr
	for len(b) > 0 {
		l := int(b[0])
		if (l != 4 && l != 16) || len(b) < 1+l {
			return out, errShort
		}
		out = append(out, keyAddr(b[1:1+l]))
		b = b[1+l:]
	}
	return out, nil
}
