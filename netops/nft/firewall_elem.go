package nft

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The firewall's elements: an attachment is its addresses in the maps of
// inet cnibox-firewall, each element with the owner's hash as data and the
// owner as comment. Adds, checks and removals are single-element messages;
// only DEL without the pod's addresses and GC list the maps.

// fwMapKinds are the maps of each family: pods (every attachment),
// isolated and samebridge (keyed by address) and bridgeof (address .
// bridge) for the ingressPolicy.
var fwMapKinds = []string{"pods", "isolated", "samebridge", "bridgeof"}

// fwMapName is the map of kind for the family of v6.
func fwMapName(kind string, v6 bool) string {
	if v6 {
		return kind + "6"
	}
	return kind + "4"
}

type fwMap struct {
	name            string
	keyType, keyLen uint32
}

// fwMapList lists every map with its key.
func fwMapList() []fwMap {
	var out []fwMap
	for _, v6 := range []bool{false, true} {
		addrType, n := uint32(nftTypeIPAddr), uint32(4)
		if v6 {
			addrType, n = nftTypeIP6Addr, 16
		}
		for _, k := range fwMapKinds {
			m := fwMap{name: fwMapName(k, v6), keyType: addrType, keyLen: n}
			if k == "bridgeof" {
				m.keyType, m.keyLen = concatType(addrType, nftTypeIfname), n+16
			}
			out = append(out, m)
		}
	}
	return out
}

// fwElem is one element: map, key, the owner's data and comment.
type fwElem struct {
	set   string
	key   []byte
	data  []byte
	owner string
}

// fwElems returns r's elements in the maps of kinds ("bridgeof" only with
// r.Bridge).
func fwElems(r FirewallRules, kinds ...string) []fwElem {
	var out []fwElem
	data := fwOwnerData(r.Owner)
	for _, a := range r.Addrs {
		for _, k := range kinds {
			key := a.AsSlice()
			if k == "bridgeof" {
				if r.Bridge == "" {
					continue
				}
				var ifname [16]byte
				copy(ifname[:], r.Bridge)
				key = append(key, ifname[:]...)
			}
			out = append(out, fwElem{set: fwMapName(k, a.Is6()), key: key, data: data, owner: r.Owner})
		}
	}
	return out
}

// fwPolicyKinds are the maps an attachment of policy is in.
func fwPolicyKinds(policy string) []string {
	switch policy {
	case IngressIsolated:
		return []string{"pods", "isolated"}
	case IngressSameBridge:
		return []string{"pods", "samebridge", "bridgeof"}
	}
	return []string{"pods"}
}

// fwElemMsgs builds one message per map for elems.
func fwElemMsgs(msgType int, flags mdnetlink.HeaderFlags, elems []fwElem, withData bool, timeoutMS uint64) []mdnetlink.Message {
	es := make([]setElem, len(elems))
	for i, e := range elems {
		es[i] = setElem{e.set, nftElem{key: e.key, data: e.data, comment: e.owner, timeoutMS: timeoutMS}}
	}
	return elemMsgs(FirewallTable, msgType, flags, es, withData)
}

// fwAddElems adds r's elements in one transaction; where a key is taken
// (by another owner, or by an element that is expiring) it replaces it. r's
// elements in the maps of other policies go.
func (h *Handle) fwAddElems(r FirewallRules) error {
	want := fwElems(r, fwPolicyKinds(r.Ingress)...)
	err := h.commitRaw(fwElemMsgs(unix.NFT_MSG_NEWSETELEM, mdExcl, want, true, 0)...)
	for try := 0; errors.Is(err, unix.EEXIST) && try < 3; try++ {
		var del, add []fwElem
		for _, w := range want {
			have, ok, err := h.fwGet(w)
			if err != nil {
				return err
			}
			switch {
			case !ok:
				add = append(add, w)
			case !bytes.Equal(have.data, w.data) || have.expiring || have.comment != w.owner:
				del, add = append(del, w), append(add, w)
			}
		}
		err = h.commitRaw(append(fwElemMsgs(unix.NFT_MSG_DELSETELEM, 0, del, false, 0), fwElemMsgs(unix.NFT_MSG_NEWSETELEM, mdExcl, add, true, 0)...)...)
	}
	if err != nil {
		return err
	}
	var stale []fwElem
	for _, k := range fwMapKinds {
		if !slices.Contains(fwPolicyKinds(r.Ingress), k) {
			stale = append(stale, fwElems(r, k)...)
		}
	}
	return h.fwRemoveOwn(stale)
}

// fwGet gets the element with e's key; ok is false when it (or its map)
// is missing.
func (h *Handle) fwGet(e fwElem) (nftElem, bool, error) {
	msgs, err := h.getElem(FirewallTable, e.set, e.key)
	if errors.Is(err, unix.ENOENT) {
		return nftElem{}, false, nil
	}
	if err != nil {
		return nftElem{}, false, fmt.Errorf("get element of %s: %w", e.set, err)
	}
	for _, m := range msgs {
		_, es, err := parseNftElems(m.Data)
		if err != nil {
			return nftElem{}, false, err
		}
		if len(es) > 0 {
			return es[0], true, nil
		}
	}
	return nftElem{}, false, nil
}

// fwRemoveOwn removes those of elems that the maps hold with the same data
// and not expiring already (a single get each).
func (h *Handle) fwRemoveOwn(elems []fwElem) error {
	var mine []fwElem
	for _, e := range elems {
		have, ok, err := h.fwGet(e)
		if err != nil {
			return err
		}
		if ok && !have.expiring && bytes.Equal(have.data, e.data) {
			mine = append(mine, e)
		}
	}
	return h.fwRemove(mine)
}

// fwDelElems removes r's elements in every map.
func (h *Handle) fwDelElems(r FirewallRules) error {
	return h.fwRemoveOwn(fwElems(r, fwMapKinds...))
}

// fwRemove removes elems, by expiry where the kernel can (see
// pmExpireMsgs: a deletion leaves work the socket's release waits for),
// else by re-adding each with its data and deleting it in one transaction.
// Either way the kernel compares the data: a key that holds other data now
// (another owner's) aborts the transaction, and then each element goes on
// its own, that one staying. An expired element is skipped by lookups and
// listings within a tick and freed by the set's garbage collector.
func (h *Handle) fwRemove(elems []fwElem) error {
	if len(elems) == 0 {
		return nil
	}
	err := h.fwRemoveBatch(elems)
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if len(elems) == 1 {
		return nil // its key holds another owner's data
	}
	var errs []error
	for _, e := range elems {
		errs = append(errs, h.fwRemove([]fwElem{e}))
	}
	return errors.Join(errs...)
}

func (h *Handle) fwRemoveBatch(elems []fwElem) error {
	err := h.commitRaw(fwElemMsgs(unix.NFT_MSG_NEWSETELEM, 0, elems, true, 1)...)
	if err == nil {
		have, ok, err := h.fwGet(elems[0])
		if err != nil || !ok || have.expiring {
			return err
		}
		// An older kernel took the elements unchanged: delete after all.
	} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return h.commitRaw(append(fwElemMsgs(unix.NFT_MSG_NEWSETELEM, 0, elems, true, 0), fwElemMsgs(unix.NFT_MSG_DELSETELEM, 0, elems, false, 0)...)...)
}

// fwCheckElems reports (wrapping ErrNotFound) an element of r that is
// missing, held by another owner or expiring.
func (h *Handle) fwCheckElems(r FirewallRules) error {
	for _, w := range fwElems(r, fwPolicyKinds(r.Ingress)...) {
		have, ok, err := h.fwGet(w)
		if err != nil {
			return err
		}
		if !ok || have.expiring || !bytes.Equal(have.data, w.data) {
			return fmt.Errorf("inet %s map %s has no element of %s for %s: %w", FirewallTable, w.set, r.Owner, fwKeyString(w.key), ErrNotFound)
		}
	}
	return nil
}

// fwKeyString shows a key: the address, and the bridge of a bridgeof key.
func fwKeyString(key []byte) string {
	switch len(key) {
	case 4, 16:
		a, _ := netip.AddrFromSlice(key)
		return a.String()
	case 20, 32:
		a, _ := netip.AddrFromSlice(key[:len(key)-16])
		return a.String() + " . " + string(bytes.TrimRight(key[len(key)-16:], "\x00"))
	}
	return fmt.Sprintf("%x", key)
}

// fwDeleteOwned removes every element whose comment del reports true for,
// listing each map.
func (h *Handle) fwDeleteOwned(del func(string) bool) error {
	var gone []fwElem
	for _, m := range fwMapList() {
		es, err := h.dumpElems(FirewallTable, m.name)
		if err != nil {
			return err
		}
		for _, e := range es {
			if !e.expiring && e.comment != "" && del(e.comment) {
				gone = append(gone, fwElem{set: m.name, key: e.key, data: e.data, owner: e.comment})
			}
		}
	}
	return h.fwRemove(gone)
}
