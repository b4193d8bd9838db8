package tuning

import (
	"context"
	"errors"
	"net"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
)

// tuningDel puts back what ADD changed, from the attachment's record (which
// Records.Del then removes). A missing record, an empty CNI_NETNS, a namespace or
// interface that is gone: nothing to restore, and no error.
func tuningDel(_ context.Context, a *cniplug.Args, rec Record, found bool) error {
	if !found {
		return nil // no record (or no store file): ADD never recorded anything here
	}
	if err := tuningRestore(a, rec); err != nil {
		return err
	}
	fault.Point("tuning/del/after-restore")
	return nil
}

// tuningRestore writes the recorded values back into the pod, when its
// namespace is still there. The interface attributes go first, then the
// sysctls, newest first.
func tuningRestore(a *cniplug.Args, rec Record) error {
	if a.Netns == "" {
		return nil
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		return nil // the namespace is gone, and what was tuned in it
	}
	defer pod.Close()
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, netops.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if _, err := pod.LinkSettings(a.IfName); err == nil {
		if rec.MTU != 0 {
			keep(pod.SetMTU(a.IfName, rec.MTU))
		}
		if mac, err := net.ParseMAC(rec.MAC); err == nil {
			keep(pod.SetMAC(a.IfName, mac))
		}
		if rec.Promisc != nil {
			keep(pod.SetPromisc(a.IfName, *rec.Promisc))
		}
		if rec.Allmulti != nil {
			keep(pod.SetAllmulticast(a.IfName, *rec.Allmulti))
		}
		if rec.TxQLen != nil {
			keep(pod.SetTxQLen(a.IfName, *rec.TxQLen))
		}
	} else {
		keep(err)
	}
	back := make([]netops.SysctlSetting, len(rec.Sysctls))
	for i, sv := range rec.Sysctls {
		back[i] = netops.SysctlSetting{Key: sv.Key, Value: sv.Value}
	}
	keep(tuningRestoreSysctls(pod, back))
	if err := errors.Join(errs...); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "restore what tuning changed in %s (the record stays for the next DEL): %w", a.Netns, err)
	}
	return nil
}

// tuningGC removes the records of this network's attachments that are not
// in the valid list; their pods are gone, so there is nothing to restore.
func tuningGC(_ context.Context, a *cniplug.Args, _ *tuningSettings) error {
	st, err := chain.OpenRecords(a)
	if err != nil || st == nil {
		return err
	}
	defer st.Close()
	recs, err := Records.In(st).List(a.Conf.Name)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if a.Conf.Keeps(r.ContainerID, r.IfName) {
			continue
		}
		if err := Records.In(st).Delete(r.Network, r.ContainerID, r.IfName); err != nil {
			return err
		}
	}
	return nil
}
