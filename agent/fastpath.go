package agent

import (
	"errors"
	"slices"

	"github.com/cnibox/cnibox/netops/nft"
)

// The fast path (--fast-path, issue 53; netops/nft/fastpath.go): the
// node's established pod connections forwarded from a flowtable. Its
// devices are the ones the pods' routed traffic crosses: the backend's
// (flannel.1, flannel-wg), the underlay interface (host-gw's path, and
// the way out of the cluster), and each bridge that holds an address of
// this node's subnet (the pods' gateway: cni0). Bridges of other
// programs (docker0) and other devices are left alone. Checked with the
// other rules every RulesResync: a bridge made by the first pod's ADD
// joins at the next one.

// ensureFastPath makes the fast path's table match the node, or removes
// it without --fast-path. A kernel without flowtables is logged once.
func (a *agent) ensureFastPath() error {
	n := a.h.NFT()
	if !a.o.FastPath || a.noFlowtables {
		if devs, _, err := n.FastPath(); err == nil && devs == nil {
			return nil
		}
		return n.DeleteFastPath()
	}
	devs, err := a.fastPathDevices()
	if err != nil {
		return err
	}
	changed, err := n.EnsureFastPath(nft.FastPathSpec{Devices: devs, After: a.o.FastPathAfter})
	if errors.Is(err, nft.ErrNoFlowtable) {
		a.noFlowtables = true
		a.log.Warn("this kernel has no nftables flowtables: no fast path for established connections (--fast-path)", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if changed {
		a.log.Info("fast path for established connections", "devices", devs, "after-packets", a.o.FastPathAfter)
	}
	return nil
}

// fastPathDevices are the fast path's devices on this node, sorted.
func (a *agent) fastPathDevices() ([]string, error) {
	links, err := a.h.Links()
	if err != nil {
		return nil, err
	}
	want := map[string]bool{a.under.Iface: a.under.Iface != ""}
	for _, d := range a.be.Devices() {
		want[d] = true
	}
	var out []string
	for _, l := range links {
		if l.Kind == "bridge" && !want[l.Name] {
			addrs, err := a.h.Addrs(l.Name)
			if err != nil {
				continue // gone meanwhile
			}
			for _, p := range addrs {
				if a.own.Subnet.Contains(p.Addr()) || a.own.Subnet6.Contains(p.Addr()) {
					want[l.Name] = true
				}
			}
		}
		if want[l.Name] {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
