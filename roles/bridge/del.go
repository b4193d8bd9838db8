package bridge

import (
	"context"
	"errors"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// del removes the attachment. Everything already gone counts as removed, and
// it works with an empty CNI_NETNS: the host veth name is derived from the
// container ID and ifname, the masquerade entries from the endpoint record or
// prevResult.
func del(ctx context.Context, a *cniplug.Args, defaults Conf) error {
	c, err := parseConf(a, defaults)
	if err != nil {
		return err
	}
	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	// Close after the veth delete: the nftables socket stays open across it
	// so its cleanup wait overlaps the veth's (see perf-notes).
	defer host.Close()
	err = release(ctx, a, c, func(ips []netip.Addr) error {
		if c.IPMasq && len(ips) > 0 {
			if err := host.DeleteMasq(ips); err != nil {
				return cniplug.Errorf(types.ErrIOFailure, "remove masquerade entries %v: %w", ips, err)
			}
			a.Mark("masq")
			fault.Point("bridge/del/after-masq")
		}
		return c.detachHook(ctx, a, host, ips)
	})
	if err != nil {
		return err
	}
	a.Mark("release")
	fault.Point("bridge/del/after-ipam")
	hostName := c.hostVethName(a.ContainerID, a.IfName)
	if c.MacSpoofChk {
		if err := host.DeleteMacSpoofCheck(hostName); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		fault.Point("bridge/del/after-macspoof")
	}
	if err := deleteVeth(host, hostName, a); err != nil {
		return err
	}
	a.Mark("veth")
	fault.Point("bridge/del/after-veth")
	return nil
}

// release reads the attachment's addresses (endpoint record, else
// prevResult, else what is left in the kernel) and hands them to unhook
// (optional: the kernel state keyed by address, such as masquerade
// entries). Then it runs the IPAM plugin's DEL and deletes the endpoint
// record: in one store transaction when IPAM is one of cnibox's roles,
// before the slow kernel work (the veth) so the store's lock is not held
// across it. A foreign IPAM plugin runs without the lock.
//
// The addresses are freed only after unhook, with the store's lock held
// from the read: freed first, a concurrent ADD could take one and add its
// own entries, which unhook would then remove (a storm test caught a pod
// left without its masquerade entry).
func release(ctx context.Context, a *cniplug.Args, c *Conf, unhook func([]netip.Addr) error) error {
	t := a.Conf.IPAM.Type
	inProcess := t == "" // in process and inside our store transaction
	if r, ok := a.Registry.Lookup(t); ok && r.JoinsCallerStore {
		inProcess = true
	}
	st, err := openStore(a, c)
	if err != nil {
		return err
	}
	defer st.Close()
	key := store.SharedKey(st.Dir())
	a.SetShared(key, st)
	defer a.SetShared(key, nil)
	ips, err := attachmentIPs(st, a, c)
	if err != nil {
		return err
	}
	if unhook != nil {
		if err := unhook(ips); err != nil {
			return err
		}
	}
	var roleErr error
	err = st.Batch(func() error {
		if inProcess && t != "" {
			if roleErr = a.DelegateDel(ctx, t, a.StdinData); roleErr != nil {
				return roleErr
			}
		}
		return st.DeleteEndpoint(a.Conf.Name, a.ContainerID, a.IfName)
	})
	if roleErr != nil {
		return roleErr
	}
	if err != nil {
		return err
	}
	if !inProcess {
		a.SetShared(key, nil)
		st.Close()
		if err := a.DelegateDel(ctx, t, a.StdinData); err != nil {
			return err
		}
	}
	return nil
}

// deleteVeth deletes the host end (and with it the pod end). If the host end
// is not there but the pod still has CNI_IFNAME as a veth, that goes.
func deleteVeth(host *netops.Handle, hostName string, a *cniplug.Args) error {
	if _, err := host.LinkByName(hostName); err == nil {
		if err := host.DeleteLink(hostName); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete veth %s: %w", hostName, err)
		}
		return nil
	}
	if a.Netns == "" {
		return nil
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return nil // the namespace is gone, and its interfaces with it
	}
	defer pod.Close()
	l, err := pod.LinkByName(a.IfName)
	if errors.Is(err, netops.ErrNotFound) || (err == nil && l.Kind != "veth") {
		return nil
	}
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	if err := pod.DeleteLink(a.IfName); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "delete %s in the pod: %w", a.IfName, err)
	}
	return nil
}

// attachmentIPs returns the pod addresses from the endpoint record, or from
// prevResult when there is no record.
func attachmentIPs(st *store.Store, a *cniplug.Args, c *Conf) ([]netip.Addr, error) {
	ep, found, err := st.GetEndpoint(a.Conf.Name, a.ContainerID, a.IfName)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if found {
		for _, p := range ep.IPs {
			ips = append(ips, p.Addr())
		}
		return ips, nil
	}
	prev, err := a.Conf.PrevResult()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return leftoverIPs(a, c), nil
	}
	for _, ipc := range prev.IPs {
		ips = append(ips, prefixOf(ipc.Address).Addr())
	}
	return ips, nil
}
