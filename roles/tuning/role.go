package tuning

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
	"github.com/cnibox/cnibox/store"
)

// Role is the "tuning" role: a chained plugin that sets network sysctls in
// the pod and the MAC, MTU, promiscuous and all-multicast modes and transmit
// queue length of CNI_IFNAME, and puts the previous values back on DEL.
var Role = &cniplug.Role{
	Name: "tuning",
	About: "tuning changes network sysctls (net.*) inside the pod and the MAC address, MTU, promiscuous mode, " +
		"all-multicast mode and transmit queue length of CNI_IFNAME. It runs chained after a main plugin, " +
		"keeps the previous values in the node's store and restores them on DEL.",
	Add:   tuningAdd,
	Check: tuningCheck,
	Del:   tuningDel,
	GC:    tuningGC,
}

func tuningAdd(_ context.Context, a *cniplug.Args) (_ types.Result, err error) {
	s, err := parseTuningConf(a)
	if err != nil {
		return nil, err
	}
	prev, err := a.RequirePrevResult()
	if err != nil {
		return nil, err
	}
	a.Mark("config")
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()

	// What is there now: the values to restore.
	was := store.TuningRecord{Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns}
	var link netops.LinkSettings
	if s.linkChanges() {
		if link, err = pod.LinkSettings(a.IfName); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod (the one tuning changes): %w", a.IfName, err)
		}
		tuningRecordLink(&was, s, link)
	}
	if len(s.sysctls) > 0 {
		keys := make([]string, len(s.sysctls))
		for i, sc := range s.sysctls {
			keys[i] = sc.key
		}
		vals, err := pod.Sysctls(keys...)
		if errors.Is(err, netops.ErrNotFound) {
			return nil, cniplug.ConfError("sysctl", "%v: no such sysctl in the pod's namespace; check the name (and that the interface it names exists)", err)
		}
		if err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "read sysctls in the pod: %w", err)
		}
		for i, k := range keys {
			was.Sysctls = append(was.Sysctls, store.SysctlValue{Key: k, Value: vals[i]})
		}
	}
	if len(was.Sysctls) == 0 && !s.linkChanges() {
		return prev, nil // nothing asked, nothing to remember
	}

	var undo cniplug.Undo
	defer undo.Finish(&err)
	a.Mark("read")
	if err := tuningRemember(a, s.dataDir, was, &undo); err != nil {
		return nil, err
	}
	a.Mark("record")
	fault.Point("tuning/add/after-record")
	if err := tuningApply(pod, a.IfName, s, was, &undo); err != nil {
		return nil, err
	}
	a.Mark("apply")
	fault.Point("tuning/add/after-link")
	if ifc := tuningPodIf(prev, a.IfName); ifc != nil && s.mac != nil {
		ifc.Mac = s.mac.String()
	}
	undo.Discard()
	return prev, nil
}

// tuningRecordLink puts the current values of the attributes s changes into
// the record.
func tuningRecordLink(r *store.TuningRecord, s *tuningSettings, l netops.LinkSettings) {
	if s.mac != nil {
		r.MAC = l.MAC.String()
	}
	if s.mtu != 0 {
		r.MTU = l.MTU
	}
	if s.promisc != nil {
		r.Promisc = &l.Promisc
	}
	if s.allmulti != nil {
		r.Allmulti = &l.Allmulti
	}
	if s.txQLen != nil {
		q := l.TxQLen
		r.TxQLen = &q
	}
}

// tuningRemember writes the record of the previous values before anything
// changes. An ADD repeated for the same attachment keeps the values of the
// first one (the current ones are already tuned) and adds those it did not
// change.
func tuningRemember(a *cniplug.Args, dataDir string, was store.TuningRecord, undo *cniplug.Undo) error {
	st, err := store.Open(store.DirFrom(dataDir, a.Getenv))
	if err != nil {
		return err
	}
	defer st.Close()
	old, found, err := st.GetTuning(was.Network, was.ContainerID, was.IfName)
	if err != nil {
		return err
	}
	rec := was
	if found {
		rec = tuningMerge(old, was)
	}
	if err := st.PutTuning(rec); err != nil {
		return err
	}
	dir := store.DirFrom(dataDir, a.Getenv)
	undo.Push(func() {
		st, err := store.Open(dir)
		if err != nil {
			return
		}
		defer st.Close()
		if found {
			_ = st.PutTuning(old)
		} else {
			_ = st.DeleteTuning(was.Network, was.ContainerID, was.IfName)
		}
	})
	return nil
}

// tuningMerge keeps old's values and adds those of now that old lacks.
func tuningMerge(old, now store.TuningRecord) store.TuningRecord {
	out := old
	out.Netns = now.Netns
	have := map[string]bool{}
	for _, sv := range old.Sysctls {
		have[sv.Key] = true
	}
	for _, sv := range now.Sysctls {
		if !have[sv.Key] {
			out.Sysctls = append(out.Sysctls, sv)
		}
	}
	if out.MAC == "" {
		out.MAC = now.MAC
	}
	if out.MTU == 0 {
		out.MTU = now.MTU
	}
	if out.Promisc == nil {
		out.Promisc = now.Promisc
	}
	if out.Allmulti == nil {
		out.Allmulti = now.Allmulti
	}
	if out.TxQLen == nil {
		out.TxQLen = now.TxQLen
	}
	return out
}

// tuningApply makes the changes, in the reference plugin's order (sysctls,
// MAC, promiscuous mode, MTU, all-multicast, txqueuelen), pushing the undo
// of each. was holds the values before.
func tuningApply(pod *netops.Handle, ifname string, s *tuningSettings, was store.TuningRecord, undo *cniplug.Undo) error {
	if len(s.sysctls) > 0 {
		set := make([]netops.SysctlSetting, len(s.sysctls))
		back := make([]netops.SysctlSetting, len(was.Sysctls))
		for i, sc := range s.sysctls {
			set[i] = netops.SysctlSetting{Key: sc.key, Value: sc.value}
		}
		for i, sv := range was.Sysctls {
			back[i] = netops.SysctlSetting{Key: sv.Key, Value: sv.Value}
		}
		// Pushed first: a write that fails half way leaves the earlier ones set.
		undo.Push(func() { tuningRestoreSysctls(pod, back) })
		if err := pod.SetSysctls(set...); err != nil {
			return tuningKernelErr("sysctl", err)
		}
		fault.Point("tuning/add/after-sysctl")
	}
	if s.mac != nil {
		old, _ := net.ParseMAC(was.MAC)
		if err := pod.SetMAC(ifname, s.mac); err != nil {
			return tuningKernelErr("mac", err)
		}
		undo.Push(func() { _ = pod.SetMAC(ifname, old) })
	}
	if s.promisc != nil {
		if err := pod.SetPromisc(ifname, *s.promisc); err != nil {
			return tuningKernelErr("promisc", err)
		}
		old := *was.Promisc
		undo.Push(func() { _ = pod.SetPromisc(ifname, old) })
	}
	if s.mtu != 0 {
		if err := pod.SetMTU(ifname, s.mtu); err != nil {
			return tuningKernelErr("mtu", err)
		}
		old := was.MTU
		undo.Push(func() { _ = pod.SetMTU(ifname, old) })
	}
	if s.allmulti != nil {
		if err := pod.SetAllmulticast(ifname, *s.allmulti); err != nil {
			return tuningKernelErr("allmulti", err)
		}
		old := *was.Allmulti
		undo.Push(func() { _ = pod.SetAllmulticast(ifname, old) })
	}
	if s.txQLen != nil {
		if err := pod.SetTxQLen(ifname, *s.txQLen); err != nil {
			return tuningKernelErr("txQLen", err)
		}
		old := *was.TxQLen
		undo.Push(func() { _ = pod.SetTxQLen(ifname, old) })
	}
	return nil
}

// tuningRestoreSysctls writes previous values back, newest change first,
// each on its own so that one that is gone does not stop the others. It
// returns the failures other than a missing sysctl.
func tuningRestoreSysctls(pod *netops.Handle, back []netops.SysctlSetting) error {
	var errs []error
	for i := len(back) - 1; i >= 0; i-- {
		if err := pod.SetSysctls(back[i]); err != nil && !errors.Is(err, netops.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tuningKernelErr codes a failed change: a value the kernel refuses is a
// config error naming the field, anything else an I/O failure.
func tuningKernelErr(field string, err error) error {
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) ||
		errors.Is(err, syscall.ERANGE) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return cniplug.ConfError(field, "the kernel refused the change: %v; fix the value (or leave the field out)", err)
	}
	return cniplug.Errorf(types.ErrIOFailure, "tuning %s: %w", field, err)
}

// tuningPodIf returns the result's entry of the pod interface called ifname.
func tuningPodIf(res *current.Result, ifname string) *current.Interface {
	for _, ifc := range res.Interfaces {
		if ifc.Name == ifname && ifc.Sandbox != "" {
			return ifc
		}
	}
	return nil
}

// tuningSameValue reports whether a sysctl reads as the configured value,
// whitespace aside (the kernel prints multi-value sysctls with tabs).
func tuningSameValue(have, want string) bool {
	return strings.Join(strings.Fields(have), " ") == strings.Join(strings.Fields(want), " ")
}

// tuningErrf is a CHECK failure: the pod is not as configured.
func tuningErrf(format string, args ...any) error {
	return cniplug.Errorf(types.ErrIOFailure, "tuning CHECK: %s", fmt.Sprintf(format, args...))
}
