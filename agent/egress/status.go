//go:build !nokube

package egress

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// reporter reports whether this node writes the gateways' status: the
// first, by name, of the nodes holding an address (they are alive: they
// renew), or when none holds one, the plan's (the first of the nodes
// whose agents publish their networks).
func (c *controller) reporter() bool {
	var hs []string
	for _, h := range c.Holders {
		hs = append(hs, h)
	}
	if len(hs) > 0 {
		return slices.Min(hs) == c.Node
	}
	return c.plan.Reporter
}

// writeStatus writes each gateway's status when this node is the reporter
// and it changed: the holder of each address and the Ready condition.
func (c *controller) writeStatus(ctx context.Context) {
	if !c.reporter() {
		return
	}
	for name := range c.status { // (a gateway deleted: forget its last status)
		if _, ok, _ := c.gws.GetByKey(name); !ok {
			delete(c.status, name)
		}
	}
	for _, o := range c.gws.List() {
		g, ok := o.(*EgressGateway)
		if !ok {
			continue
		}
		want := GatewayStatus{}
		for _, s := range g.Spec.EgressIPs {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if h := c.Holders[ip]; h != "" {
				want.EgressIPs = append(want.EgressIPs, HeldIP{EgressIP: s, Node: h})
			}
		}
		cond := c.plan.Conditions[g.Name]
		status := metav1.ConditionFalse
		if cond.Ready {
			status = metav1.ConditionTrue
		}
		want.Conditions = slices.Clone(g.Status.Conditions)
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: "Ready", Status: status, Reason: cond.Reason,
			Message: cond.Message, ObservedGeneration: g.Generation, LastTransitionTime: metav1.NewTime(time.Now())})
		b, _ := json.Marshal(want)
		have, _ := json.Marshal(g.Status)
		if string(b) == string(have) || c.status[g.Name] == string(b) {
			continue
		}
		st := map[string]any{"egressIPs": want.EgressIPs, "conditions": want.Conditions}
		if want.EgressIPs == nil {
			st["egressIPs"] = nil
		}
		if err := kubeapi.PatchStatusMerge(ctx, c.gwc, kubeapi.Ref{Resource: Resource, Name: g.Name}, st); err != nil {
			c.cfg.Log.Warn("egress gateways: cannot write a gateway's status", "gateway", g.Name, "err", err)
			continue
		}
		c.status[g.Name] = string(b)
	}
}
