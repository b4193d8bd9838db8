package attach

import (
	"context"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Release undoes Reserve: it reads the attachment's addresses (from the
// endpoint record, else prevResult, else none) and hands them to unhook
// (optional: kernel state keyed by address, such as masquerade entries),
// then runs the IPAM plugin's DEL and deletes the record. With IPAM in
// process that is one store transaction, with the store's lock held from the
// read, so a concurrent ADD cannot take a freed address before unhook is
// done with it. A foreign IPAM plugin runs after, without the lock.
// Everything already gone counts as released.
func Release(ctx context.Context, a *cniplug.Args, dataDir string, unhook func([]netip.Addr) error) error {
	return ReleaseWith(ctx, a, dataDir, ReleaseOpts{Unhook: unhook})
}

// ReleaseOpts are the role's own steps of ReleaseWith. Both are optional.
type ReleaseOpts struct {
	// Unhook removes the kernel state keyed by the pod's addresses (such
	// as masquerade entries) before the addresses are freed.
	Unhook func([]netip.Addr) error
	// Leftover finds the pod's addresses of an attachment with neither an
	// endpoint record nor a prevResult (best effort; GC removes what it
	// cannot find). Without it such an attachment has none.
	Leftover func() []netip.Addr
}

// DelVeth is the DEL of a veth attachment whose host end is hostName:
// Release (with unhook), then the veth pair (DeleteVeth), whose routes go
// with it; each step is marked on a.
func DelVeth(ctx context.Context, a *cniplug.Args, dataDir string, host *netops.Handle, hostName string, unhook func([]netip.Addr) error) error {
	if err := Release(ctx, a, dataDir, unhook); err != nil {
		return err
	}
	a.Mark("release")
	if err := DeleteVeth(host, hostName, a); err != nil {
		return err
	}
	a.Mark("veth")
	return nil
}

// ReleaseWith is Release with the role's own steps o.
func ReleaseWith(ctx context.Context, a *cniplug.Args, dataDir string, o ReleaseOpts) error {
	t := a.Conf.IPAM.Type
	inProcess := inProcessIPAM(a)
	st, err := OpenStore(a, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	key := store.SharedKey(st.Dir())
	a.SetShared(key, st)
	defer a.SetShared(key, nil)
	ips, err := attachmentIPs(st, a, o.Leftover)
	if err != nil {
		return err
	}
	if o.Unhook != nil {
		if err := o.Unhook(ips); err != nil {
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
	if inProcess {
		return nil
	}
	a.SetShared(key, nil)
	st.Close()
	return a.DelegateDel(ctx, t, a.StdinData)
}

// attachmentIPs returns the pod addresses from the endpoint record, or from
// prevResult when there is no record, else what leftover (optional) finds.
func attachmentIPs(st *store.Store, a *cniplug.Args, leftover func() []netip.Addr) ([]netip.Addr, error) {
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
		if leftover == nil {
			return nil, nil
		}
		return leftover(), nil
	}
	for _, ipc := range prev.IPs {
		ips = append(ips, PrefixOf(ipc.Address).Addr())
	}
	return ips, nil
}
