package portmap

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// What the portmap role's CHECK verifies in the kernel, exported for the
// operator's CLI (`cnibox doctor`, `cnibox gc`), so both read the table and
// the records the same way.

// PortMapOwner is the owner comment the portmap role writes into the
// elements of an attachment ("<network> <containerID> <ifname>", with a too
// long network name or container ID replaced by "#" and a hash).
func PortMapOwner(network, containerID, ifname string) string {
	return pmOwner(network, containerID, ifname)
}

// PortMapState is what table inet cnibox-portmap holds for one element an
// attachment should have (or has without wanting it).
type PortMapState struct {
	// Mapping is the forwarded port; zero (no PodIP) for a masquerade entry.
	Mapping nft.PortMapping
	// Masq is the masquerade entry; zero (no PodIP) for a mapping.
	Masq nft.PortMasq
	// Status says whether the element is right, and if not, how not.
	Status PortMapStatus
	// Problem is "" when the element is there with exactly that data and
	// owned by the attachment; otherwise what is wrong, for a person.
	Problem string
}

// PortMapStatus is the verdict on one element.
type PortMapStatus int

// The verdicts of VerifyPortMaps.
const (
	// PortMapOK: there, with that data, owned by the attachment.
	PortMapOK PortMapStatus = iota
	// PortMapMissing: no element has the key.
	PortMapMissing
	// PortMapTakenOver: the key is another attachment's (the newest ADD of
	// a host port wins).
	PortMapTakenOver
	// PortMapOtherData: the attachment's element forwards elsewhere.
	PortMapOtherData
	// PortMapUnexpected: the attachment has the element but should not.
	PortMapUnexpected
)

// IsMasq reports whether s is about a masquerade entry.
func (s PortMapState) IsMasq() bool { return s.Masq.PodIP.IsValid() }

func (s PortMapState) String() string {
	what := fmt.Sprintf("port mapping %s", s.Mapping)
	if s.IsMasq() {
		what = "masquerade entry of " + s.Masq.PodIP.String()
		if s.Masq.All {
			what += " (masqAll)"
		}
	}
	if s.Problem == "" {
		return what
	}
	return what + ": " + s.Problem
}

// VerifyPortMaps looks up the keys of want in table inet cnibox-portmap
// (single-element gets: the cost does not depend on the number of pods) and
// returns one state per wanted element, in want's order, followed by the
// elements owned by want.Owner under those keys that want does not list.
func VerifyPortMaps(host *netops.Handle, want nft.PortMaps) ([]PortMapState, error) {
	if want.Empty() {
		return nil, nil
	}
	got, err := host.NFT().LookupPortMaps(want)
	if err != nil {
		return nil, err
	}
	type held struct {
		owner string
		m     nft.PortMapping
		q     nft.PortMasq
	}
	var maps, masqs []held
	for _, g := range got {
		for _, m := range g.Mappings {
			maps = append(maps, held{owner: g.Owner, m: m})
		}
		for _, q := range g.Masq {
			masqs = append(masqs, held{owner: g.Owner, q: q})
		}
	}
	var out []PortMapState
	used := map[int]bool{}
	for _, w := range want.Mappings {
		st := PortMapState{Mapping: w, Status: PortMapMissing, Problem: "missing from table inet " + nft.PortMapTable}
		for i, h := range maps {
			if !h.m.SameKey(w) {
				continue
			}
			used[i] = true
			switch {
			case h.owner != want.Owner:
				st.Status, st.Problem = PortMapTakenOver, fmt.Sprintf("the host port belongs to %q now, not to this attachment", h.owner)
			case h.m.PodIP != w.PodIP || h.m.PodPort != w.PodPort:
				st.Status, st.Problem = PortMapOtherData, "forwards to "+netip.AddrPortFrom(h.m.PodIP, h.m.PodPort).String()+" instead"
			default:
				st.Status, st.Problem = PortMapOK, ""
			}
		}
		out = append(out, st)
	}
	usedQ := map[int]bool{}
	for _, w := range want.Masq {
		st := PortMapState{Masq: w, Status: PortMapMissing, Problem: "missing from table inet " + nft.PortMapTable}
		for i, h := range masqs {
			if h.q != w {
				continue
			}
			usedQ[i] = true
			if h.owner != want.Owner {
				st.Status, st.Problem = PortMapTakenOver, fmt.Sprintf("belongs to %q, not to this attachment", h.owner)
			} else {
				st.Status, st.Problem = PortMapOK, ""
			}
		}
		out = append(out, st)
	}
	for i, h := range maps {
		if !used[i] && h.owner == want.Owner {
			out = append(out, PortMapState{Mapping: h.m, Status: PortMapUnexpected, Problem: "unexpected"})
		}
	}
	for i, h := range masqs {
		if !usedQ[i] && h.owner == want.Owner {
			out = append(out, PortMapState{Masq: h.q, Status: PortMapUnexpected, Problem: "unexpected"})
		}
	}
	return out, nil
}
