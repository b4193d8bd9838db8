package attach

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// CheckSource is the CHECK of the source address check of the host end
// port (kind says where it is): the port's element and one per address of
// ips, the pod's, in every table of the check (a get each). What is
// missing is named, as the reference plugins' CHECK names a missing
// address or route: the port, the table and set, and the address. No
// addresses is nothing to check (the ADD checked none).
func CheckSource(host *netops.Handle, kind nft.SrcCheckKind, port string, ips []netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	gaps, err := host.NFT().SourceCheckGaps(kind, port, ips)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "ipspoofchk: %w", err)
	}
	if len(gaps) == 0 {
		return nil
	}
	// Per table: the port's element (without it the port is unchecked) and
	// those of the addresses (without one, what the pod sends from it is
	// dropped while the port is checked).
	var tables []string
	port0 := map[string]bool{}
	addrs := map[string][]string{}
	for _, g := range gaps {
		if !slices.Contains(tables, g.Table) {
			tables = append(tables, g.Table)
		}
		if g.Addr.IsValid() {
			addrs[g.Table] = append(addrs[g.Table], fmt.Sprintf("%s (set %s)", g.Addr, g.Set))
		} else {
			port0[g.Table] = true
		}
	}
	missing := make([]string, 0, len(tables))
	for _, t := range tables {
		a := strings.Join(addrs[t], ", ")
		switch {
		case port0[t] && a != "":
			missing = append(missing, fmt.Sprintf("table %s has no element for the port (set ports: unchecked, the pod can send as any address) nor for the pod's addresses %s", t, a))
		case port0[t]:
			missing = append(missing, fmt.Sprintf("table %s has no element for the port (set ports: unchecked, the pod can send as any address)", t))
		default:
			missing = append(missing, fmt.Sprintf("table %s has no element for the pod's addresses %s (what the pod sends from them is dropped)", t, a))
		}
	}
	return cniplug.Errorf(types.ErrIOFailure, "ipspoofchk: the source address check of host end %q is not whole: %s: DEL and ADD the attachment again to restore it",
		port, strings.Join(missing, "; "))
}

// NodeCheck is the node side of a veth attachment's CHECK
// (CheckOpts.Node): hostEnd, the role's check of the host end port, then,
// with spoofChk, the port's source address check (CheckSource; kind says
// where the port is) against the pod's addresses in prevResult.
func NodeCheck(a *cniplug.Args, kind nft.SrcCheckKind, port string, spoofChk bool, hostEnd func(*netops.Handle, *current.Result) error) func(*netops.Handle, *current.Result) error {
	return func(host *netops.Handle, prev *current.Result) error {
		if err := hostEnd(host, prev); err != nil {
			return err
		}
		if !spoofChk {
			return nil
		}
		return CheckSource(host, kind, port, PodIPs(prev, a.IfName))
	}
}

// PodIPs are the addresses prev gives the pod's interface ifname: those of
// an interface of that name in a sandbox, and those that name no
// interface (as CheckPodAddrs reads them).
func PodIPs(prev *current.Result, ifname string) []netip.Addr {
	var ips []netip.Addr
	for _, ipc := range prev.IPs {
		if i := ipc.Interface; i != nil {
			if *i < 0 || *i >= len(prev.Interfaces) || prev.Interfaces[*i].Name != ifname || prev.Interfaces[*i].Sandbox == "" {
				continue
			}
		}
		ips = append(ips, PrefixOf(ipc.Address).Addr())
	}
	return ips
}

// CheckRoutedEnd is the host end check (NodeCheck's hostEnd) of a routed
// pod's veth (ptp, azure-vnet's transparent mode): the host end hostName
// is there and up, own (the role's checks of it, optional) passes, and the
// node routes each address of prevResult to it (in the main table, where
// the ADD put them).
func CheckRoutedEnd(host *netops.Handle, hostName string, prev *current.Result, own func() error) error {
	hl, err := host.LinkByName(hostName)
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "host end %q of the pod's veth: %w", hostName, err)
	}
	if !hl.Up {
		return cniplug.Errorf(types.ErrIOFailure, "host end %q is down", hostName)
	}
	if own != nil {
		if err := own(); err != nil {
			return err
		}
	}
	routes, err := host.Routes(hostName)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	for _, ipc := range prev.IPs {
		ip := PrefixOf(ipc.Address).Addr()
		dst := netip.PrefixFrom(ip, ip.BitLen())
		if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst == dst && r.Table == 0 }) {
			return cniplug.Errorf(types.ErrIOFailure, "the node's route to the pod address %s via %q is missing", ip, hostName)
		}
	}
	return nil
}
