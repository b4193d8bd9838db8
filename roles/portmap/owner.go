package portmap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// Owners. Every element's comment is "<network> <containerID> <ifname>"; a
// network name or container ID too long for the comment is replaced by "#"
// and 32 hex digits of its sha256.

func ownerToken(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:16])
}

func pmOwner(network, containerID, ifname string) string {
	return ownerToken(network, 100) + " " + ownerToken(containerID, 128) + " " + ifname
}

// ownerNetwork returns the network token of an owner comment.
func ownerNetwork(owner string) string {
	n, _, _ := strings.Cut(owner, " ")
	return n
}

// parseOwner returns the attachment of an owner comment; ok is false for a
// foreign or hashed one.
func parseOwner(owner string) (network, containerID, ifname string, ok bool) {
	f := strings.Split(owner, " ")
	if len(f) != 3 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[1], "#") {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// Records.

func recordOf(a *cniplug.Args, pm nft.PortMaps) Record {
	r := Record{Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Pod: a.CNIArgs.Pod()}
	for _, m := range pm.Mappings {
		r.Mappings = append(r.Mappings, Entry{Protocol: m.Proto.String(), HostIP: m.HostIP, HostPort: m.HostPort, PodIP: m.PodIP, PodPort: m.PodPort})
	}
	for _, m := range pm.Masq {
		r.Masq = append(r.Masq, MasqEntry{PodIP: m.PodIP, All: m.All})
	}
	return r
}

func portMapsOf(r Record) nft.PortMaps {
	pm := nft.PortMaps{Owner: pmOwner(r.Network, r.ContainerID, r.IfName)}
	for _, m := range r.Mappings {
		p, ok := nft.ParsePortProto(m.Protocol)
		if !ok {
			continue
		}
		pm.Mappings = append(pm.Mappings, nft.PortMapping{Proto: p, HostIP: m.HostIP, HostPort: m.HostPort, PodIP: m.PodIP, PodPort: m.PodPort})
	}
	for _, m := range r.Masq {
		pm.Masq = append(pm.Masq, nft.PortMasq{PodIP: m.PodIP, All: m.All})
	}
	return pm
}

// putPortmapRecord records pm for the attachment and takes the replaced
// elements out of the records of the attachments that had them, in one
// store transaction. It returns the attachment's previous mappings.
func putPortmapRecord(a *cniplug.Args, c *portmapConf, pm nft.PortMaps, replaced []nft.PortMaps) (nft.PortMaps, error) {
	st, err := pmStore(a, c)
	if err != nil {
		return nft.PortMaps{}, err
	}
	defer st.Close()
	var old nft.PortMaps
	err = Records.Update(st, func(tx store.KindTx[Record]) error {
		if r, found, err := tx.Get(a.Conf.Name, a.ContainerID, a.IfName); err != nil {
			return err
		} else if found {
			old = portMapsOf(r)
		}
		for _, lost := range replaced {
			network, cid, ifname, ok := parseOwner(lost.Owner)
			if !ok || lost.Owner == pm.Owner {
				continue
			}
			pmLog(a, "took over %v from %s", lost.Mappings, lost.Owner)
			r, found, err := tx.Get(network, cid, ifname)
			if err != nil || !found {
				continue
			}
			rest := recordOf(a, minusPortMaps(portMapsOf(r), lost))
			r.Mappings, r.Masq = rest.Mappings, rest.Masq
			if len(r.Mappings) == 0 && len(r.Masq) == 0 {
				err = tx.Delete(network, cid, ifname)
			} else {
				err = tx.Put(r)
			}
			if err != nil {
				return err
			}
		}
		return tx.Put(recordOf(a, pm))
	})
	if err != nil {
		return nft.PortMaps{}, fmt.Errorf("record port mappings: %w", err)
	}
	return old, nil
}

// minusPortMaps returns the mappings and masquerade entries of p whose keys
// are not in q.
func minusPortMaps(p, q nft.PortMaps) nft.PortMaps {
	samePod := func(m, o nft.PortMasq) bool { return m.PodIP == o.PodIP }
	return nft.PortMaps{Owner: p.Owner, Mappings: minus(p.Mappings, q.Mappings, nft.PortMapping.SameKey), Masq: minus(p.Masq, q.Masq, samePod)}
}

// minus returns the elements of p that have no same element in q.
func minus[T any](p, q []T, same func(a, b T) bool) []T {
	var out []T
	for _, m := range p {
		if !slices.ContainsFunc(q, func(o T) bool { return same(m, o) }) {
			out = append(out, m)
		}
	}
	return out
}

func pmStore(a *cniplug.Args, c *portmapConf) (*store.Store, error) {
	return store.Open(store.DirFrom(c.DataDir, a.Getenv))
}

// pmRecord reads the record of the call's attachment.
func pmRecord(a *cniplug.Args, c *portmapConf) (rec Record, found bool, err error) {
	st, err := pmStore(a, c)
	if err != nil {
		return rec, false, err
	}
	defer st.Close()
	err = Records.View(st, func(tx store.KindTx[Record]) error {
		rec, found, err = tx.Get(a.Conf.Name, a.ContainerID, a.IfName)
		return err
	})
	return rec, found, err
}

func pmLog(a *cniplug.Args, format string, args ...any) {
	if a.Stderr != nil {
		fmt.Fprintf(a.Stderr, "cnibox portmap: "+format+"\n", args...)
	}
}
