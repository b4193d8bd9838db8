package netconf

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Backend types of cnibox-agent, as flannel names them (Type is matched
// case-insensitively, as flannel does, and kept in lower case).
const (
	TypeVXLAN     = "vxlan"
	TypeHostGW    = "host-gw"
	TypeWireGuard = "wireguard"
	TypeIPIP      = "ipip"
	TypeAlloc     = "alloc"
)

// Defaults of the wireguard backend, as in flannel.
const (
	DefaultWGPort   = 51820
	DefaultWGPortV6 = 51821
)

// WireGuard modes (flannel's Mode): Separate runs a device per family
// (flannel-wg, flannel-wg-v6), the others one device (flannel-wg) whose
// peers are reached over IPv4 (ModeIPv4), IPv6 (ModeIPv6), or whichever of
// the peer's addresses is public (ModeAuto).
const (
	ModeSeparate = "separate"
	ModeAuto     = "auto"
	ModeIPv4     = "ipv4"
	ModeIPv6     = "ipv6"
)

// Overheads: what each encapsulation costs in MTU. WireGuard's is
// flannel's 80 (outer IPv6 40 + UDP 8 + WireGuard 32), over either family;
// IPIP's the outer IPv4 header.
const (
	WireGuardOverhead = 80
	IPIPOverhead      = 20
)

// Backend is the "Backend" object of net-conf.json: Type and the options
// of that type (the others are zero).
type Backend struct {
	Type string
	// vxlan
	VNI  int
	Port int // UDP port; DefaultPort when not given
	// MTU is flannel's: the MTU of the packets on the wire; the device gets
	// MTU minus the encapsulation's cost (vxlan: 50 bytes over IPv4, 70
	// over IPv6; wireguard: 80). 0 = the underlay interface's MTU. Only
	// vxlan and wireguard have it.
	MTU int
	// DirectRouting (vxlan, ipip): a peer on the node's own L2 network is
	// reached by a plain route via its public IP, without encapsulation.
	DirectRouting bool
	GBP           bool
	// Learning turns the kernel's learning of remote MACs on (the device's
	// "learning"); flannel programs the FDB either way.
	Learning bool

	// wireguard
	ListenPort   int    // IPv4 device's (and Mode's one device's) port; DefaultWGPort
	ListenPortV6 int    // flannel-wg-v6's port in Mode separate; DefaultWGPortV6
	PSK          string // a pre-shared key (wg genpsk), the same on every node; "" = none
	// PersistentKeepaliveInterval: how often an empty packet keeps a NAT
	// mapping open toward each peer; 0 = never.
	PersistentKeepaliveInterval time.Duration
	Mode                        string
}

type wireBackend struct {
	Type          string
	VNI           *int
	Port          int
	MTU           int
	DirectRouting bool
	GBP           bool
	Learning      bool

	ListenPort   int
	ListenPortV6 int
	PSK          string
	// flannel decodes a number into a time.Duration and multiplies it by
	// a second: the value is in seconds.
	PersistentKeepaliveInterval int64
	Mode                        string
}

// refusedBackends are flannel's types that cnibox-agent does not run, with
// why and what to use instead.
var refusedBackends = map[string]string{
	"udp": "flannel's udp backend copies every packet through flanneld in user space and flannel itself calls it " +
		"a debugging aid for kernels without VXLAN: use \"vxlan\" (the same network without the copy), or \"host-gw\" when all nodes share one L2 network",
	"ipsec": "flannel's ipsec backend needs strongSwan's charon daemon beside the agent and is deprecated upstream: " +
		"use \"wireguard\" for encrypted pod traffic (flannel's recommendation too)",
	"tencent-vpc": "flannel's tencent-vpc backend programs Tencent Cloud's VPC route table through its SDK, which cnibox does not link: " +
		"keep flanneld on a Tencent Cloud cluster that needs VPC routes, or use \"vxlan\" (or \"host-gw\" within one subnet)",
	"extension": "flannel's extension backend runs operator-supplied shell commands for every lease: " +
		"cnibox runs no shell; use one of vxlan, host-gw, wireguard or ipip",
}

func parseBackend(raw json.RawMessage) (Backend, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return Backend{}, fmt.Errorf("%w: \"Backend\" is missing: set \"Backend\": {\"Type\": \"vxlan\"} (or host-gw, wireguard, ipip, alloc)", ErrInvalid)
	}
	var wb wireBackend
	if err := json.Unmarshal(raw, &wb); err != nil {
		return Backend{}, fmt.Errorf("%w: \"Backend\": %v (PersistentKeepaliveInterval is a number of seconds, as in flannel)", ErrInvalid, err)
	}
	t := strings.ToLower(wb.Type)
	if why, ok := refusedBackends[t]; ok {
		return Backend{}, fmt.Errorf("%w: Backend.Type %q is not supported by cnibox-agent: %s", ErrInvalid, wb.Type, why)
	}
	switch t {
	case TypeVXLAN:
		return parseVXLAN(wb)
	case TypeHostGW, TypeAlloc:
		return Backend{Type: t}, nil
	case TypeIPIP:
		return Backend{Type: t, DirectRouting: wb.DirectRouting}, nil
	case TypeWireGuard:
		return parseWireGuard(wb)
	case "":
		return Backend{}, fmt.Errorf("%w: Backend.Type is missing: set \"Type\" to one of vxlan, host-gw, wireguard, ipip, alloc", ErrInvalid)
	}
	return Backend{}, fmt.Errorf("%w: Backend.Type %q is not a flannel backend: set \"Type\" to one of vxlan, host-gw, wireguard, ipip, alloc", ErrInvalid, wb.Type)
}

func parseVXLAN(wb wireBackend) (Backend, error) {
	be := Backend{Type: TypeVXLAN, VNI: DefaultVNI, Port: wb.Port, MTU: wb.MTU, DirectRouting: wb.DirectRouting, GBP: wb.GBP, Learning: wb.Learning}
	if wb.VNI != nil {
		be.VNI = *wb.VNI
	}
	if be.VNI < 0 || be.VNI > 1<<24-1 {
		return Backend{}, fmt.Errorf("%w: Backend.VNI %d is out of range: use 0..16777215 (default 1)", ErrInvalid, be.VNI)
	}
	if be.Port == 0 {
		be.Port = DefaultPort
	}
	if be.Port < 0 || be.Port > 65535 {
		return Backend{}, fmt.Errorf("%w: Backend.Port %d is out of range: use 1..65535 (default 8472)", ErrInvalid, be.Port)
	}
	if err := checkMTU(be.MTU, VXLANOverhead); err != nil {
		return Backend{}, err
	}
	return be, nil
}

func parseWireGuard(wb wireBackend) (Backend, error) {
	be := Backend{Type: TypeWireGuard, MTU: wb.MTU, ListenPort: wb.ListenPort, ListenPortV6: wb.ListenPortV6, PSK: wb.PSK, Mode: wb.Mode}
	if be.ListenPort == 0 {
		be.ListenPort = DefaultWGPort
	}
	if be.ListenPortV6 == 0 {
		be.ListenPortV6 = DefaultWGPortV6
	}
	for _, p := range []struct {
		name string
		v    int
		def  int
	}{{"ListenPort", be.ListenPort, DefaultWGPort}, {"ListenPortV6", be.ListenPortV6, DefaultWGPortV6}} {
		if p.v < 1 || p.v > 65535 {
			return Backend{}, fmt.Errorf("%w: Backend.%s %d is out of range: use 1..65535 (default %d)", ErrInvalid, p.name, p.v, p.def)
		}
	}
	if be.Mode == "" {
		be.Mode = ModeSeparate
	}
	switch be.Mode {
	case ModeSeparate, ModeAuto, ModeIPv4, ModeIPv6:
	default:
		return Backend{}, fmt.Errorf("%w: Backend.Mode %q is not a WireGuard mode: use \"separate\" (default: a device per family), \"auto\", \"ipv4\" or \"ipv6\" (one device)", ErrInvalid, wb.Mode)
	}
	if be.PSK != "" {
		if k, err := base64.StdEncoding.DecodeString(be.PSK); err != nil || len(k) != 32 {
			return Backend{}, fmt.Errorf("%w: Backend.PSK is not a WireGuard key (32 bytes in base64, as `wg genpsk` prints): generate one and give every node the same", ErrInvalid)
		}
	}
	if wb.PersistentKeepaliveInterval < 0 || wb.PersistentKeepaliveInterval > 65535 {
		return Backend{}, fmt.Errorf("%w: Backend.PersistentKeepaliveInterval %d is out of range: use 0..65535 seconds (0: none)", ErrInvalid, wb.PersistentKeepaliveInterval)
	}
	be.PersistentKeepaliveInterval = time.Duration(wb.PersistentKeepaliveInterval) * time.Second
	if err := checkMTU(be.MTU, WireGuardOverhead); err != nil {
		return Backend{}, err
	}
	return be, nil
}

func checkMTU(mtu, overhead int) error {
	if mtu != 0 && (mtu < 68+overhead || mtu > 65535) {
		return fmt.Errorf("%w: Backend.MTU %d is out of range: use %d..65535 (the MTU of the packets on the wire; the device gets %d less), or leave it out for the interface's MTU",
			ErrInvalid, mtu, 68+overhead, overhead)
	}
	return nil
}

// checkFamilies refuses what a backend cannot carry.
func (be Backend) checkFamilies(c *Config) error {
	if be.Type == TypeIPIP && c.EnableIPv6 {
		return fmt.Errorf("%w: Backend.Type \"ipip\" carries IPv4 only (as flannel's): set EnableIPv6 to false, or use vxlan, wireguard or host-gw for IPv6", ErrInvalid)
	}
	if be.Type == TypeIPIP && !c.EnableIPv4 {
		return fmt.Errorf("%w: Backend.Type \"ipip\" carries IPv4 only: enable IPv4 (EnableIPv4) or use vxlan, wireguard or host-gw", ErrInvalid)
	}
	return nil
}
