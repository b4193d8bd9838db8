package azurevnet

import (
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// The source address check of transparent mode's host ends ("ipspoofchk",
// a field of cnibox's own, on by default; Azure's config has none): what
// the pod sends must carry one of its addresses, in tables inet and arp
// cnibox-src as for ptp (netops/nft's EnsureSourceCheck says what is
// checked). The pod's ARP for its virtual gateway 169.254.1.1 has the
// pod's own address as sender, so it passes and the host end's proxy ARP
// answers it; IPv6 goes through fe80::1234:5678:9abc by the pod's
// permanent neighbour entry, with the pod's global source, which the check
// allows (link-local passes for discovery only). Bridge mode is checked by
// the bridge role's own path (table bridge cnibox-src).

// checkSource checks the host end hostName against the pod's addresses pod
// (ADD), with its removal pushed on undo.
func checkSource(host *netops.Handle, undo *cniplug.Undo, c *tconf, hostName string, pod []netip.Prefix) error {
	if !attach.SpoofCheckOn(c.IPSpoofChk) {
		return nil
	}
	return attach.SourceCheck(host, undo, nft.SrcCheckRouted, hostName, pod)
}

// uncheckSource removes the check of hostName (DEL): the elements of ips,
// else what the sets hold for it. Gone is no error.
func uncheckSource(host *netops.Handle, c *tconf, hostName string, ips []netip.Addr) error {
	if !attach.SpoofCheckOn(c.IPSpoofChk) {
		return nil
	}
	return attach.SourceUncheck(host, nft.SrcCheckRouted, hostName, ips)
}

// deleteSourceCheck removes the check of the host end hostName of a
// leftover pair of this attachment, whose addresses may not be this ADD's.
func deleteSourceCheck(host *netops.Handle, hostName string) error {
	return host.NFT().DeleteSourceCheck(nft.SrcCheckRouted, hostName, nil)
}

// gcSourceChecks removes the checks, in the tables of kinds, of azure-vnet
// host ends that are gone and not kept by GC's list: what an ADD that died
// after the check, a DEL that never came, or a DEL with "ipspoofchk" since
// turned off leaves.
func gcSourceChecks(host *netops.Handle, a *cniplug.Args, kinds ...nft.SrcCheckKind) error {
	keep := map[string]bool{}
	for _, k := range a.Conf.GCKeep() {
		keep[HostVethName(k.ContainerID, k.IfName)] = true
	}
	for _, kind := range kinds {
		if err := attach.GCSourceChecks(host, kind, keep, IsHostVeth); err != nil {
			return err
		}
	}
	return nil
}
