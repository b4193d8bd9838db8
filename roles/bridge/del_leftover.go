package bridge

import (
	"encoding/json"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// leftoverIPs finds the pod addresses of an attachment that has neither an
// endpoint record nor a prevResult: an ADD that died between the masquerade
// entries and the record, whose runtime had no result to pass to DEL. They
// are what host-local (run in process, on this node's store) still holds for
// the attachment, else the addresses of CNI_IFNAME in the pod. Only the
// masquerade entries need them, so without ipMasq it returns nothing; it is
// best effort (GC removes what it cannot find).
func leftoverIPs(a *cniplug.Args, c *Conf) []netip.Addr {
	if !c.IPMasq {
		return nil
	}
	var ips []netip.Addr
	if a.Conf.IPAM.Type == "host-local" {
		var raw struct {
			IPAM struct {
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		_ = json.Unmarshal(a.StdinData, &raw)
		st, done, err := store.OpenShared(a.Shared, store.DirFrom(raw.IPAM.DataDir, a.Getenv), store.Options{Getenv: a.Getenv, NoCreate: true})
		if err == nil {
			_ = st.ViewIPAM(a.Conf.Name, func(tx *store.IPAMTx) error {
				for _, r := range tx.ByOwner(a.ContainerID, a.IfName) {
					ips = append(ips, r.Addr)
				}
				return nil
			})
			_ = done()
		}
	}
	if len(ips) > 0 || a.Netns == "" {
		return ips
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return nil
	}
	defer pod.Close()
	addrs, _ := pod.Addrs(a.IfName)
	for _, p := range addrs {
		ips = append(ips, p.Addr())
	}
	return ips
}
