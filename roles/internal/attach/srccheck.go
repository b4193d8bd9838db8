package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// The source address check of a pod's host veth ("ipspoofchk", on by
// default): what the pod sends must carry one of its addresses
// (netops/nft's EnsureSourceCheck says what is checked).

// SpoofCheckOn reports whether a veth role's "ipspoofchk" field (nil:
// left out) turns the check on: it is on unless set to false.
func SpoofCheckOn(field *bool) bool { return field == nil || *field }

// SourceCheck checks the host end port (a bridge port or a routed veth, by
// kind) against the pod's addresses pod, in one nftables transaction, and
// pushes its removal on undo. An attachment without addresses is not
// checked.
func SourceCheck(host *netops.Handle, undo *cniplug.Undo, kind nft.SrcCheckKind, port string, pod []netip.Prefix) error {
	if len(pod) == 0 {
		return nil
	}
	ips := make([]netip.Addr, 0, len(pod))
	for _, p := range pod {
		ips = append(ips, p.Addr())
	}
	if err := host.NFT().EnsureSourceCheck(kind, port, ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "ipspoofchk: %w", err)
	}
	undo.Push(func() { _ = host.NFT().DeleteSourceCheck(kind, port, ips) })
	return nil
}

// SourceUncheck removes the check of port (DEL): the elements of ips, the
// pod's addresses, or, when they are not known, whatever the sets hold for
// port. Gone is no error.
func SourceUncheck(host *netops.Handle, kind nft.SrcCheckKind, port string, ips []netip.Addr) error {
	if err := host.NFT().DeleteSourceCheck(kind, port, ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "ipspoofchk: %w", err)
	}
	return nil
}

// GCSourceChecks removes the checks of ports of ours that are gone and not
// kept (GCPortChecks).
func GCSourceChecks(host *netops.Handle, kind nft.SrcCheckKind, keep map[string]bool, ours func(string) bool) error {
	ports, err := host.NFT().SourceCheckPorts(kind)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	return GCPortChecks(host, ports, keep, ours, "source address check", func(port string) error {
		return host.NFT().DeleteSourceCheck(kind, port, nil)
	})
}

// GCPortChecks deletes with del the checks of ports (the host ports
// checks apply to) that are ours, gone and not kept: what an ADD that died
// after the check, or a DEL that never came, leaves. A check without its
// port is useless whatever its network, and ADD makes the port before its
// check and DEL deletes the check before the port, so no live attachment
// ever has a check without its port. what names the check in errors.
func GCPortChecks(host *netops.Handle, ports []string, keep map[string]bool, ours func(string) bool, what string, del func(port string) error) error {
	if len(ports) == 0 {
		return nil
	}
	links, err := host.Links()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	exists := make(map[string]bool, len(links))
	for _, l := range links {
		exists[l.Name] = true
	}
	for _, port := range ports {
		if !ours(port) || keep[port] || exists[port] {
			continue
		}
		if err := del(port); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale %s of %s: %w", what, port, err)
		}
	}
	return nil
}
