package tuning

import (
	"cmp"
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
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "tuning" role: a chained plugin that sets network sysctls in
// the pod and the MAC, MTU, promiscuous and all-multicast modes and transmit
// queue length of CNI_IFNAME, and puts the previous values back on DEL.
var Role = &cniplug.Role{
	Name: "tuning",
	About: "tuning changes network sysctls (net.*) inside the pod and the MAC address, MTU, promiscuous mode, " +
		"all-multicast mode and transmit queue length of CNI_IFNAME. It runs chained after a main plugin, " +
		"keeps the previous values in the node's store and restores them on DEL.",
	Verbs: &chain.Verbs[*tuningSettings]{Parse: parseTuningConf, Add: tuningAdd, Check: tuningCheck, Records: &tuningRecords,
		ParseGC: cniplug.Unparsed[*tuningSettings], GC: tuningGC},

	Known: &known,
}

// tuningRecords are the tuning records of the store, and DEL from them.
var tuningRecords = chain.Records[Record]{
	Kind:     &Records,
	Teardown: tuningDel, AfterDel: "tuning/del/after-record",
}

func tuningAdd(_ context.Context, a *cniplug.Args, s *tuningSettings, prev *current.Result) (_ types.Result, err error) {
	a.Mark("config")
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return nil, err
	}
	defer pod.Close()

	// What is there now: the values to restore.
	was := Record{Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns}
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
			was.Sysctls = append(was.Sysctls, SysctlValue{Key: k, Value: vals[i]})
		}
	}
	if len(was.Sysctls) == 0 && !s.linkChanges() {
		return prev, nil // nothing asked, nothing to remember
	}

	var undo cniplug.Undo
	defer undo.Finish(&err)
	a.Mark("read")
	// An ADD repeated for the same attachment keeps the values of the first
	// one (the current ones are already tuned) and adds those it did not
	// change.
	if _, err := tuningRecords.Remember(a, was, tuningMerge, &undo); err != nil {
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
func tuningRecordLink(r *Record, s *tuningSettings, l netops.LinkSettings) {
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

// tuningMerge keeps old's values and adds those of now that old lacks.
func tuningMerge(old, now Record) Record {
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
	out.MAC = cmp.Or(old.MAC, now.MAC)
	out.MTU = cmp.Or(old.MTU, now.MTU)
	out.Promisc = cmp.Or(old.Promisc, now.Promisc)
	out.Allmulti = cmp.Or(old.Allmulti, now.Allmulti)
	out.TxQLen = cmp.Or(old.TxQLen, now.TxQLen)
	return out
}

// tuningApply makes the changes, in the reference plugin's order (sysctls,
// MAC, promiscuous mode, MTU, all-multicast, txqueuelen), pushing the undo
// of each. was holds the values before.
func tuningApply(pod *netops.Handle, ifname string, s *tuningSettings, was Record, undo *cniplug.Undo) error {
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
	oldMAC, _ := net.ParseMAC(was.MAC)
	for _, f := range []struct {
		field     string
		on        bool
		set, back func() error
	}{
		{"mac", s.mac != nil, func() error { return pod.SetMAC(ifname, s.mac) }, func() error { return pod.SetMAC(ifname, oldMAC) }},
		{"promisc", s.promisc != nil, func() error { return pod.SetPromisc(ifname, *s.promisc) }, func() error { return pod.SetPromisc(ifname, *was.Promisc) }},
		{"mtu", s.mtu != 0, func() error { return pod.SetMTU(ifname, s.mtu) }, func() error { return pod.SetMTU(ifname, was.MTU) }},
		{"allmulti", s.allmulti != nil, func() error { return pod.SetAllmulticast(ifname, *s.allmulti) }, func() error { return pod.SetAllmulticast(ifname, *was.Allmulti) }},
		{"txQLen", s.txQLen != nil, func() error { return pod.SetTxQLen(ifname, *s.txQLen) }, func() error { return pod.SetTxQLen(ifname, *was.TxQLen) }},
	} {
		if !f.on {
			continue
		}
		if err := f.set(); err != nil {
			return tuningKernelErr(f.field, err)
		}
		undo.Push(func() { _ = f.back() })
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
