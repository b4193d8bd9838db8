package multi

import (
	"context"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
)

// networkStatus is one entry of the k8s.v1.cni.cncf.io/network-status
// annotation, as Multus writes it.
type networkStatus struct {
	Name      string    `json:"name"`
	Interface string    `json:"interface,omitempty"`
	IPs       []string  `json:"ips,omitempty"`
	MAC       string    `json:"mac,omitempty"`
	Default   bool      `json:"default,omitempty"`
	DNS       types.DNS `json:"dns"`
}

// networkStatuses builds the annotation's entries from the delegates' ADD
// results: the primary is "default"; a network from the pod's annotation is
// named "namespace/name", a configured one by its network name.
func networkStatuses(c *multiConf, results []types.Result, names map[int]string) ([]networkStatus, error) {
	var out []networkStatus
	for i, d := range c.Delegates {
		st := networkStatus{Name: d.List.Name, Interface: d.IfName, Default: i == 0}
		if n, ok := names[i]; ok {
			st.Name = n
		}
		if results[i] != nil {
			r, err := current.NewResultFromResult(results[i])
			if err != nil {
				return nil, cniplug.Errorf(types.ErrInternal, "multi: the result of %s: %w", d.describe(), err)
			}
			st.DNS = r.DNS
			idx := -1
			for k, ifc := range r.Interfaces {
				if ifc.Name == d.IfName && ifc.Sandbox != "" {
					idx, st.MAC = k, ifc.Mac
				}
			}
			for _, ip := range r.IPs {
				if ip.Interface != nil && idx >= 0 && *ip.Interface != idx {
					continue
				}
				st.IPs = append(st.IPs, ip.Address.IP.String())
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// report writes the network-status annotation of every delegate (nil p:
// nothing to do).
func (p *multiPod) report(ctx context.Context, c *multiConf, results []types.Result) error {
	if p == nil {
		return nil
	}
	st, err := networkStatuses(c, results, p.statusNames)
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
	return nil
}
