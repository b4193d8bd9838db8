package attach

import (
	"context"
	"net"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// OpenNamespaces opens the pod's namespace at netns (code 3 when it cannot)
// and the node's (code 5); the caller closes both.
func OpenNamespaces(netns string) (pod, host *netops.Handle, err error) {
	if pod, err = podns.Open(netns); err != nil {
		return nil, nil, err
	}
	if host, err = podns.Host(); err != nil {
		_ = pod.Close()
		return nil, nil, err
	}
	return pod, host, nil
}

// OnHost adapts a verb that works in the node's namespace to one of
// cniplug.ConfVerbs: it opens the namespace (code 5 when it cannot) and
// closes it when the verb is done.
func OnHost[C any](verb func(context.Context, *cniplug.Args, C, *netops.Handle) error) func(context.Context, *cniplug.Args, C) error {
	return func(ctx context.Context, a *cniplug.Args, c C) error {
		return podns.InHost(func(host *netops.Handle) error { return verb(ctx, a, c, host) })
	}
}

// VethADD is where the ADD of a veth attachment starts: the pod's namespace
// and the node's, open, and the pod end's MAC.
type VethADD struct {
	Pod, Host *netops.Handle
	// MAC is CNI_ARGS' MAC, else one picked before the veth exists, so that
	// the endpoint record can hold it.
	MAC net.HardwareAddr
}

// BeginVethADD starts the ADD of a veth attachment with host end hostName:
// the pod end's MAC, the namespaces, and CNI_IFNAME free in the pod
// (FreeIfName, with before). The caller closes the VethADD.
func BeginVethADD(a *cniplug.Args, hostName string, before func(host *netops.Handle, hostName string) error) (*VethADD, error) {
	mac, err := a.RequestedMAC()
	if err != nil {
		return nil, err
	}
	if mac == nil {
		mac = netops.RandomMAC()
	}
	pod, host, err := OpenNamespaces(a.Netns)
	if err != nil {
		return nil, err
	}
	v := &VethADD{Pod: pod, Host: host, MAC: mac}
	if err := FreeIfName(pod, host, a, hostName, before); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// Close closes both namespaces.
func (v *VethADD) Close() {
	_ = v.Pod.Close()
	_ = v.Host.Close()
}
