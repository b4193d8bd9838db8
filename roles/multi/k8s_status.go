package multi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// networkStatus is one entry of the k8s.v1.cni.cncf.io/network-status
// annotation, with every field Multus writes (the NPWG client's
// NetworkStatus).
type networkStatus struct {
	Name       string          `json:"name"`
	Interface  string          `json:"interface,omitempty"`
	IPs        []string        `json:"ips,omitempty"`
	MAC        string          `json:"mac,omitempty"`
	MTU        int             `json:"mtu,omitempty"`
	Default    bool            `json:"default,omitempty"`
	DNS        statusDNS       `json:"dns"`
	DeviceInfo json.RawMessage `json:"device-info,omitempty"`
	Gateway    []string        `json:"gateway,omitempty"`
}

// statusDNS is the annotation's dns (empty lists left out).
type statusDNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// delegateStatuses returns the entries of one delegate's ADD result, as
// Multus' CreateNetworkStatuses makes them: one per interface in the pod
// (one with a sandbox); with a single interface in the result, one entry
// with every address; with several, each interface gets the addresses that
// point at it (those pointing nowhere go to the last one), and on the
// primary network the interface with the first gateway, else the first, is
// "default". "gateway" lists the result's default routes' gateways.
func delegateStatuses(d *multiDelegate, res types.Result, primary bool, devinfo json.RawMessage) ([]networkStatus, error) {
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrInternal, "multi: the result of %s: %w", d.describe(), err)
	}
	dns := statusDNS{Nameservers: r.DNS.Nameservers, Domain: r.DNS.Domain, Search: r.DNS.Search, Options: r.DNS.Options}
	var gws []string
	for _, rt := range r.Routes {
		if isDefault(rt.Dst) && rt.GW != nil {
			gws = append(gws, rt.GW.String())
		}
	}
	base := networkStatus{Name: d.statusName(), DNS: dns, DeviceInfo: devinfo, Gateway: gws}
	if len(r.Interfaces) == 1 {
		st := base
		st.Default = primary
		if ifc := r.Interfaces[0]; ifc.Sandbox != "" {
			st.Interface, st.MAC, st.MTU = ifc.Name, ifc.Mac, ifc.Mtu
		}
		for _, ip := range r.IPs {
			st.IPs = append(st.IPs, ip.Address.IP.String())
		}
		return []networkStatus{st}, nil
	}
	gwIdx := -1
	if primary {
		for _, ip := range r.IPs {
			if ip.Gateway != nil && ip.Interface != nil {
				gwIdx = *ip.Interface
				break
			}
		}
	}
	var out []networkStatus
	index := map[int]int{}
	setDefault := false
	for i, ifc := range r.Interfaces {
		if ifc.Sandbox == "" {
			continue
		}
		st := base
		st.Interface, st.MAC, st.MTU = ifc.Name, ifc.Mac, ifc.Mtu
		if primary && !setDefault && (i == gwIdx || gwIdx == -1) {
			st.Default, setDefault = true, true
		}
		index[i] = len(out)
		out = append(out, st)
	}
	for _, ip := range r.IPs {
		if ip.Interface != nil {
			if j, ok := index[*ip.Interface]; ok {
				out[j].IPs = append(out[j].IPs, ip.Address.IP.String())
			}
		} else if len(out) > 0 {
			out[len(out)-1].IPs = append(out[len(out)-1].IPs, ip.Address.IP.String())
		}
	}
	return out, nil
}

// isDefault reports whether dst is a default route's destination.
func isDefault(dst net.IPNet) bool {
	if dst.IP == nil && dst.Mask == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && (dst.IP.Equal(net.IPv4zero) || dst.IP.Equal(net.IPv6zero))
}

// networkStatuses builds the annotation from every delegate's ADD result
// (the primary is delegates[0]).
func networkStatuses(c *multiConf, results []types.Result, devinfo []json.RawMessage) ([]networkStatus, error) {
	var out []networkStatus
	for i, d := range c.Delegates {
		if results[i] == nil {
			continue
		}
		st, err := delegateStatuses(d, results[i], i == 0, devinfo[i])
		if err != nil {
			return nil, err
		}
		out = append(out, st...)
	}
	return out, nil
}

// addedEvents are the AddedInterface events of the ADD, one per delegate
// whose result has interfaces or addresses, worded as Multus words them.
func addedEvents(c *multiConf, results []types.Result) []agentapi.Event {
	var out []agentapi.Event
	for i, d := range c.Delegates {
		r, err := current.NewResultFromResult(results[i])
		if err != nil || (r.Interfaces == nil && r.IPs == nil) {
			continue
		}
		ips := []string{}
		for _, ip := range r.IPs {
			ips = append(ips, ip.Address.String())
		}
		out = append(out, agentapi.Event{Type: "Normal", Reason: "AddedInterface",
			Message: fmt.Sprintf("Add %s %v from %s", d.IfName, ips, d.statusName())})
	}
	return out
}

// report writes the network-status annotation of every delegate and
// records the AddedInterface events (nil p: nothing to do). The events are
// best effort, as in Multus.
func (p *multiPod) report(ctx context.Context, a *cniplug.Args, c *multiConf, results []types.Result, devinfo []json.RawMessage) error {
	if p == nil {
		return nil
	}
	st, err := networkStatuses(c, results, devinfo)
	if err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return cniplug.Errorf(types.ErrInternal, "multi: encode the network-status: %w", err)
	}
	if err := p.client.SetNetworkStatus(ctx, p.namespace, p.name, p.id, b); err != nil {
		return agentErr(p, "writing the network-status", err)
	}
	if err := p.client.Events(ctx, p.namespace, p.name, p.id, addedEvents(c, results)); err != nil {
		delegate.Log(a, "multi ADD: AddedInterface events of pod %s not recorded (ignored): %v", p, err)
	}
	return nil
}
