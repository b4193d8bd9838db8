package tuning

import (
	"bytes"
	"context"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// tuningCheck verifies that the sysctls and interface attributes in the pod
// are as configured.
func tuningCheck(_ context.Context, a *cniplug.Args, s *tuningSettings, prev *current.Result) error {
	pod, err := podns.Open(a.Netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	if len(s.sysctls) > 0 {
		keys := make([]string, len(s.sysctls))
		for i, sc := range s.sysctls {
			keys[i] = sc.key
		}
		vals, err := pod.Sysctls(keys...)
		if err != nil {
			return tuningErrf("%v", err)
		}
		for i, sc := range s.sysctls {
			if !tuningSameValue(vals[i], sc.value) {
				return tuningErrf("sysctl %s is %q in the pod, the config says %q", sc.name, vals[i], sc.value)
			}
		}
	}
	if !s.linkChanges() {
		return nil
	}
	l, err := pod.LinkSettings(a.IfName)
	if err != nil {
		return tuningErrf("interface %q in the pod: %v", a.IfName, err)
	}
	switch {
	case s.mac != nil && !bytes.Equal(l.MAC, s.mac):
		return tuningErrf("%s has MAC %s, the config says %s", a.IfName, l.MAC, s.mac)
	case s.mtu != 0 && l.MTU != s.mtu:
		return tuningErrf("%s has MTU %d, the config says %d", a.IfName, l.MTU, s.mtu)
	case s.promisc != nil && l.Promisc != *s.promisc:
		return tuningErrf("%s has promiscuous mode %v, the config says %v", a.IfName, l.Promisc, *s.promisc)
	case s.allmulti != nil && l.Allmulti != *s.allmulti:
		return tuningErrf("%s has all-multicast mode %v, the config says %v", a.IfName, l.Allmulti, *s.allmulti)
	case s.txQLen != nil && l.TxQLen != *s.txQLen:
		return tuningErrf("%s has txqueuelen %d, the config says %d", a.IfName, l.TxQLen, *s.txQLen)
	}
	if ifc := tuningPodIf(prev, a.IfName); ifc != nil && s.mac != nil && ifc.Mac != "" && ifc.Mac != s.mac.String() {
		return tuningErrf("the ADD result says %s has MAC %s, the config says %s", a.IfName, ifc.Mac, s.mac)
	}
	return nil
}
