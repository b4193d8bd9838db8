package bandwidth

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/chain"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// Role is the "bandwidth" role: a chained plugin that limits a pod's
// traffic with token bucket filters on the node. Traffic to the pod is
// shaped by a tbf on the host end of its veth; traffic from the pod is
// redirected from that end's ingress to an ifb device with a tbf.
var Role = &cniplug.Role{
	Name: "bandwidth",
	About: "bandwidth limits the pod's traffic with token bucket filters (tc tbf) on the node: ingressRate/ingressBurst " +
		"on the host end of the pod's veth, egressRate/egressBurst on an ifb device that the host end's incoming packets " +
		"are redirected to. Rates are in bits per second, bursts in bits; the \"bandwidth\" capability overrides the config. " +
		"It runs chained after a veth-based main plugin such as bridge.",
	Verbs: &chain.Verbs[*bwLimits]{Parse: parseBandwidthConf, Add: bandwidthAdd, Check: bandwidthCheck, Records: &bwRecords,
		ParseGC: cniplug.Unparsed[*bwLimits], GC: bandwidthGC},

	Known: &known,
}

// bwRecords are the bandwidth records of the store, and DEL from them.
var bwRecords = chain.Records[Record]{
	Kind:     &Records,
	Teardown: bandwidthDel, AfterDel: "bandwidth/del/after-record",
}

func bandwidthAdd(_ context.Context, a *cniplug.Args, c *bwLimits, prev *current.Result) (_ types.Result, err error) {
	if c.isZero() {
		return prev, nil
	}
	host, err := podns.Host()
	if err != nil {
		return nil, err
	}
	defer host.Close()
	hostIf, err := bwHostIf(host, a.Netns, a.IfName, prev)
	if err != nil {
		return nil, err
	}

	rec := Record{
		Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, HostIf: hostIf.Name,
		IngressRate: c.IngressRate, IngressBurst: c.IngressBurst, EgressRate: c.EgressRate, EgressBurst: c.EgressBurst,
	}
	if c.EgressRate > 0 {
		rec.Ifb = bwIfbName(a.ContainerID, a.IfName)
	}
	var undo cniplug.Undo
	defer undo.Finish(&err)
	// The record first: an ifb of ours without one belongs to no attachment.
	old, err := bwRecords.Remember(a, rec, nil, &undo)
	if err != nil {
		return nil, err
	}
	fault.Point("bandwidth/add/after-record")
	if err := bwDropUnwanted(host, old, rec); err != nil {
		return nil, err
	}

	if c.IngressRate > 0 {
		if err := host.EnsureRootTBF(hostIf.Name, netops.NewTBF(c.IngressRate/8, c.IngressBurst/8)); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "ingressRate: shape traffic to the pod on %s: %w", hostIf.Name, err)
		}
		if old.IngressRate == 0 {
			undo.Push(func() { _ = host.DeleteRootTBF(hostIf.Name) })
		}
		fault.Point("bandwidth/add/after-ingress")
	}
	if c.EgressRate > 0 {
		ifb, created, err := host.EnsureIfb(rec.Ifb, hostIf.MTU)
		if err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "egressRate: ifb device for the pod's traffic: %w", err)
		}
		if created {
			undo.Push(func() { _ = host.DeleteLink(rec.Ifb) })
		}
		fault.Point("bandwidth/add/after-ifb")
		if err := host.EnsureRootTBF(rec.Ifb, netops.NewTBF(c.EgressRate/8, c.EgressBurst/8)); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "egressRate: shape the pod's traffic on %s: %w", rec.Ifb, err)
		}
		if err := host.EnsureIngressRedirect(hostIf.Name, rec.Ifb); err != nil {
			return nil, cniplug.Errorf(types.ErrIOFailure, "egressRate: %w", err)
		}
		if old.Ifb == "" {
			undo.Push(func() { _ = host.DeleteIngressQdisc(hostIf.Name) })
		}
		fault.Point("bandwidth/add/after-egress")
		if !bwHasIf(prev, rec.Ifb) {
			prev.Interfaces = append(prev.Interfaces, &current.Interface{Name: rec.Ifb, Mac: ifb.MAC.String()})
		}
	}
	undo.Discard()
	return prev, nil
}

// bwHostIf finds the host end of the pod interface ifname: the interface of
// prevResult outside the pod whose index is the pod veth's peer index.
func bwHostIf(host *netops.Handle, netns, ifname string, prev *current.Result) (netops.Link, error) {
	pod, err := podns.Open(netns)
	if err != nil {
		return netops.Link{}, err
	}
	pl, err := pod.LinkByName(ifname)
	pod.Close()
	if err != nil {
		return netops.Link{}, cniplug.Errorf(types.ErrIOFailure, "interface %q in the pod: %w", ifname, err)
	}
	if pl.Kind != "veth" || pl.PeerIndex == 0 {
		return netops.Link{}, cniplug.Errorf(types.ErrInvalidNetworkConfig, "interface %q in the pod is a %q, not a veth: bandwidth shapes on the host end of a veth, so chain it after a veth-based plugin such as bridge or ptp", ifname, pl.Kind)
	}
	for _, ifc := range prev.Interfaces {
		if ifc.Sandbox != "" {
			continue
		}
		l, err := host.LinkByName(ifc.Name)
		if err == nil && l.Index == pl.PeerIndex {
			return l, nil
		}
	}
	return netops.Link{}, cniplug.Errorf(types.ErrInvalidNetworkConfig, "the host end of the pod's %q (ifindex %d on the node) is not among the interfaces of \"prevResult\": bandwidth needs the main plugin to report it", ifname, pl.PeerIndex)
}

// bwDropUnwanted removes what an earlier ADD of the same attachment set up
// (old, zero when there was none) and this one no longer asks for.
func bwDropUnwanted(host *netops.Handle, old, now Record) error {
	if old.IngressRate > 0 && now.IngressRate == 0 && old.HostIf != "" {
		if err := host.DeleteRootTBF(old.HostIf); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
	}
	if old.Ifb != "" && now.Ifb == "" {
		return bwTeardown(host, old.HostIf, old.Ifb, false)
	}
	return nil
}

// bwTeardown removes the redirect (and, with ingress, the tbf) from the host
// end and deletes the ifb. Everything already gone counts as removed.
func bwTeardown(host *netops.Handle, hostIf, ifb string, ingress bool) error {
	if hostIf != "" {
		if err := host.DeleteIngressQdisc(hostIf); err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		if ingress {
			if err := host.DeleteRootTBF(hostIf); err != nil {
				return cniplug.WithCode(types.ErrIOFailure, err)
			}
		}
	}
	if ifb == "" {
		return nil
	}
	if _, found, err := bwIfb(host, ifb); err != nil || !found {
		return err
	}
	if err := host.DeleteLink(ifb); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "delete ifb %s: %w", ifb, err)
	}
	return nil
}

// bwIfb looks up the ifb device called name; found is false when there is
// none (a link of another kind by that name is not ours).
func bwIfb(host *netops.Handle, name string) (l netops.Link, found bool, err error) {
	l, err = host.LinkByName(name)
	if errors.Is(err, netops.ErrNotFound) || (err == nil && l.Kind != "ifb") {
		return l, false, nil
	}
	if err != nil {
		return l, false, cniplug.WithCode(types.ErrIOFailure, err)
	}
	return l, true, nil
}

func bwHasIf(res *current.Result, name string) bool {
	for _, ifc := range res.Interfaces {
		if ifc.Name == name && ifc.Sandbox == "" {
			return true
		}
	}
	return false
}
