// Package netconf parses flannel's network configuration (net-conf.json, or
// the value of <prefix>/config in etcd), so that an operator's existing
// configuration works unchanged with cnibox-agent.
package netconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// Defaults of the VXLAN backend, as in flannel.
const (
	DefaultVNI  = 1
	DefaultPort = 8472
)

// ErrInvalid is wrapped by every error about a configuration that cannot be
// used.
var ErrInvalid = errors.New("invalid network configuration")

// Config is the cluster network configuration.
type Config struct {
	EnableIPv4 bool
	EnableIPv6 bool

	Network   netip.Prefix // the IPv4 cluster network
	SubnetLen int          // each node's IPv4 lease length
	SubnetMin netip.Addr   // first IPv4 subnet a node may lease
	SubnetMax netip.Addr   // last IPv4 subnet a node may lease

	IPv6Network   netip.Prefix
	IPv6SubnetLen int
	IPv6SubnetMin netip.Addr
	IPv6SubnetMax netip.Addr

	Backend Backend

	// EnableNFTables is flannel's switch between its iptables and its
	// nftables rules. cnibox-agent always writes nftables (through
	// netlink; no iptables binary), so it is accepted and reported only.
	EnableNFTables bool
}

// wire is net-conf.json as flannel writes it (JSON keys match case-insensitively).
type wire struct {
	EnableIPv4    *bool
	EnableIPv6    bool
	Network       string
	SubnetLen     int
	SubnetMin     string
	SubnetMax     string
	IPv6Network   string
	IPv6SubnetLen int
	IPv6SubnetMin string
	IPv6SubnetMax string
	Backend       json.RawMessage
	// EnableNFTables is accepted (cnibox always uses nftables).
	EnableNFTables bool
}

// Parse decodes and validates a network configuration and fills in
// flannel's defaults: SubnetLen 24 (or a quarter of a small network),
// SubnetMin the second subnet of the network, SubnetMax the last one, and
// each backend's (backends.go).
func Parse(b []byte) (*Config, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: not valid JSON: %v", ErrInvalid, err)
	}
	c := &Config{EnableIPv4: w.EnableIPv4 == nil || *w.EnableIPv4, EnableIPv6: w.EnableIPv6, EnableNFTables: w.EnableNFTables}
	if !c.EnableIPv4 && !c.EnableIPv6 {
		return nil, fmt.Errorf("%w: EnableIPv4 is false and EnableIPv6 is not set: enable at least one family", ErrInvalid)
	}
	if c.EnableIPv4 {
		r, err := parseRange(family{name: "", bits: 32, defLen: 24, maxLen: 30}, w.Network, w.SubnetLen, w.SubnetMin, w.SubnetMax)
		if err != nil {
			return nil, err
		}
		c.Network, c.SubnetLen, c.SubnetMin, c.SubnetMax = r.network, r.subnetLen, r.min, r.max
	}
	if c.EnableIPv6 {
		r, err := parseRange(family{name: "IPv6", bits: 128, defLen: 64, maxLen: 126}, w.IPv6Network, w.IPv6SubnetLen, w.IPv6SubnetMin, w.IPv6SubnetMax)
		if err != nil {
			return nil, err
		}
		c.IPv6Network, c.IPv6SubnetLen, c.IPv6SubnetMin, c.IPv6SubnetMax = r.network, r.subnetLen, r.min, r.max
	}
	be, err := parseBackend(w.Backend)
	if err != nil {
		return nil, err
	}
	c.Backend = be
	if err := be.checkFamilies(c); err != nil {
		return nil, err
	}
	return c, nil
}

type family struct {
	name   string // "" for IPv4, "IPv6"
	bits   int
	defLen int
	maxLen int
}

type subnetRange struct {
	network   netip.Prefix
	subnetLen int
	min, max  netip.Addr
}

func parseRange(f family, network string, subnetLen int, minS, maxS string) (subnetRange, error) {
	field := func(s string) string { return f.name + s }
	if f.name == "" {
		field = func(s string) string { return s }
	}
	netField := field("Network")
	if network == "" {
		return subnetRange{}, fmt.Errorf("%w: %q is missing: set the cluster network, e.g. %q", ErrInvalid, netField, map[int]string{32: "10.244.0.0/16", 128: "fd00:10:244::/56"}[f.bits])
	}
	p, err := netip.ParsePrefix(network)
	if err != nil || p.Addr().BitLen() != f.bits || p.Addr().Is4In6() {
		return subnetRange{}, fmt.Errorf("%w: %s %q is not an IPv%d CIDR", ErrInvalid, netField, network, map[int]int{32: 4, 128: 6}[f.bits])
	}
	if p != p.Masked() {
		return subnetRange{}, fmt.Errorf("%w: %s %q has host bits set: use %s", ErrInvalid, netField, network, p.Masked())
	}
	r := subnetRange{network: p, subnetLen: subnetLen}
	lenField := field("SubnetLen")
	if subnetLen > 0 {
		if subnetLen > f.maxLen {
			return subnetRange{}, fmt.Errorf("%w: %s %d is too long: use at most %d", ErrInvalid, lenField, subnetLen, f.maxLen)
		}
		if subnetLen < p.Bits()+2 {
			return subnetRange{}, fmt.Errorf("%w: %s %d does not fit four subnets into %s %s: use at least %d", ErrInvalid, lenField, subnetLen, netField, p, p.Bits()+2)
		}
	} else {
		switch {
		case p.Bits() > f.maxLen-2:
			return subnetRange{}, fmt.Errorf("%w: %s %s is too small: use at most a /%d", ErrInvalid, netField, p, f.maxLen-2)
		case p.Bits() <= f.defLen-2:
			r.subnetLen = f.defLen
		default:
			r.subnetLen = p.Bits() + 2
		}
	}
	size := new(big.Int).Lsh(big.NewInt(1), uint(f.bits-r.subnetLen))
	base := toInt(p.Addr())
	last := new(big.Int).Add(base, new(big.Int).Lsh(big.NewInt(1), uint(f.bits-p.Bits())))
	last.Sub(last, size)
	r.min = fromInt(new(big.Int).Add(base, size), f.bits)
	r.max = fromInt(last, f.bits)
	for _, b := range []struct {
		name string
		val  string
		dst  *netip.Addr
	}{{field("SubnetMin"), minS, &r.min}, {field("SubnetMax"), maxS, &r.max}} {
		if b.val == "" {
			continue
		}
		a, err := netip.ParseAddr(b.val)
		if err != nil || a.BitLen() != f.bits || !p.Contains(a) {
			return subnetRange{}, fmt.Errorf("%w: %s %q is not an address inside %s %s", ErrInvalid, b.name, b.val, netField, p)
		}
		if netip.PrefixFrom(a, r.subnetLen).Masked().Addr() != a {
			return subnetRange{}, fmt.Errorf("%w: %s %s is not on a /%d boundary: use %s", ErrInvalid, b.name, a, r.subnetLen, netip.PrefixFrom(a, r.subnetLen).Masked().Addr())
		}
		*b.dst = a
	}
	if r.max.Less(r.min) {
		return subnetRange{}, fmt.Errorf("%w: %s %s is below %s %s", ErrInvalid, field("SubnetMax"), r.max, field("SubnetMin"), r.min)
	}
	return r, nil
}

// Subnets returns how many subnets of length subnetLen lie between min and
// max (inclusive).
func Subnets(min, max netip.Addr, subnetLen int) *big.Int {
	n := new(big.Int).Sub(toInt(max), toInt(min))
	n.Rsh(n, uint(min.BitLen()-subnetLen))
	return n.Add(n, big.NewInt(1))
}

// NthSubnet returns the i-th subnet of length subnetLen counted from min.
func NthSubnet(min netip.Addr, subnetLen int, i *big.Int) netip.Prefix {
	off := new(big.Int).Lsh(i, uint(min.BitLen()-subnetLen))
	return netip.PrefixFrom(fromInt(off.Add(off, toInt(min)), min.BitLen()), subnetLen)
}

func toInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func fromInt(i *big.Int, bits int) netip.Addr {
	b := make([]byte, bits/8)
	i.FillBytes(b)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// VXLANOverhead is the encapsulation's cost in MTU over an IPv4 underlay
// (outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14); VXLANOverhead6
// over IPv6 (outer IPv6 40).
const (
	VXLANOverhead  = 50
	VXLANOverhead6 = 70
)

// DeviceName returns the name of the VXLAN device of vni: flannel.<VNI>, and
// flannel-v6.<VNI> for IPv6, as flannel names them.
func DeviceName(vni int, v6 bool) string {
	if v6 {
		return fmt.Sprintf("flannel-v6.%d", vni)
	}
	return fmt.Sprintf("flannel.%d", vni)
}
