//go:build !nokube

package lbipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
)

// errNotFresh: the Lease is not fresh enough to write (sync stops).
var errNotFresh = errors.New("the Lease is not fresh: writing nothing until it is renewed")

// sync plans from what the informers hold (once every one has listed, and
// the Services once more from the API server: the allocations are the
// Services' status, read whole and fresh before anything is handed out)
// and writes what differs.
func (c *controller) sync(ctx context.Context) {
	l := c.lead
	for _, ok := range l.synced {
		if !ok() {
			return
		}
	}
	if !l.listed {
		if err := c.listServices(ctx); err != nil {
			c.cfg.Log.Warn("LoadBalancer IPAM: cannot list the Services: planning nothing until they are listed", "err", err)
			return
		}
		l.listed = true
	}
	if time.Since(c.lastFull) > c.cfg.Resync {
		l.reserved = c.serviceNetworks(ctx)
		c.lastFull = time.Now()
		c.poolSt = map[string]string{} // (compared with the API's again)
	}
	pools, objs := c.pools(), map[string]*LoadBalancerIPPool{}
	for _, o := range l.pools.List() {
		if p, ok := o.(*LoadBalancerIPPool); ok {
			objs[p.Name] = p
		}
	}
	var svcs []*Service
	views := map[string]*svcObj{}
	for _, o := range c.cfg.Cache.List(cluster.Services) {
		cs, ok := o.(*cluster.Service)
		if !ok {
			continue
		}
		s, ok := cs.LoadBalancer.(*svcObj)
		if !ok {
			continue // (nil: no part in the plan)
		}
		if w := c.written[s.Key()]; w != nil && w.UID == s.UID && newer(w.ResourceVersion, s.ResourceVersion) {
			s = w // (the informer has not seen this leader's last write yet)
		}
		views[s.Key()] = s
		svcs = append(svcs, &s.Service)
	}
	for k := range c.written {
		if views[k] == nil {
			delete(c.written, k)
			delete(c.reported, k)
		}
	}
	results, usage := Plan(pools, svcs)
	short := 0
	for _, r := range results {
		if r.Problem != nil {
			short++
		}
	}
	if c.writeResults(ctx, views, results) {
		return // (the Lease is not fresh)
	}
	c.m.set(usage, short)
	for _, p := range pools {
		c.writePool(ctx, objs[p.Name], p, usage[p.Name])
	}
}

// pools are the pools as the plan reads them, their conflicts found.
func (c *controller) pools() []*Pool {
	var out []*Pool
	for _, o := range c.lead.pools.List() {
		obj, ok := o.(*LoadBalancerIPPool)
		if !ok {
			continue
		}
		p, err := poolOf(obj)
		if err != nil {
			p.Conflict = err.Error()
		}
		out = append(out, p)
	}
	reserved := map[string][]netip.Prefix{"the cluster network": c.cfg.ClusterNetworks, "the Services network": c.lead.reserved}
	for _, o := range c.cfg.Cache.List(cluster.Nodes) {
		n, ok := o.(*cluster.Node)
		if !ok {
			continue
		}
		reserved["the cluster network"] = append(reserved["the cluster network"], n.PodCIDRs...)
		for _, a := range n.IPs {
			reserved["the address of node "+n.Name] = append(reserved["the address of node "+n.Name], netip.PrefixFrom(a, a.BitLen()))
		}
	}
	Refuse(out, reserved)
	return out
}

// writeService writes s's status when it is not r: its ingress and the
// controller's condition (or, for a Service no longer the controller's,
// neither), as a patch at the resourceVersion planned from.
func (c *controller) writeService(ctx context.Context, s *svcObj, r Result) error {
	var cond *metav1.Condition
	if s.Eligible {
		cond = &metav1.Condition{Type: Condition, Status: metav1.ConditionTrue, Reason: ReasonAllocated}
		if r.Problem != nil {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, r.Problem.Reason, r.Problem.Message
		}
		if cond.Message == "" {
			for i, a := range r.Addrs {
				cond.Message += fmt.Sprintf("%s from pool %s; ", a, r.Pools[i])
			}
			cond.Message = trimSemi(cond.Message)
		}
	}
	if slices.Equal(s.Holds, r.Addrs) && len(s.Ingress) == len(r.Addrs) && sameCond(s.Cond, cond) {
		return nil
	}
	if !c.el.fresh() {
		return errNotFresh
	}
	if c.cfg.BeforeWrite != nil {
		c.cfg.BeforeWrite(s.Key())
	}
	ingress := []map[string]any{}
	for _, a := range r.Addrs {
		ingress = append(ingress, map[string]any{"ip": a.String(), "ipMode": string(corev1.LoadBalancerIPModeVIP)})
	}
	var conds []map[string]any
	if cond != nil {
		t := metav1.NewTime(time.Now())
		if s.Cond != nil && s.Cond.Status == cond.Status {
			t = s.Cond.LastTransitionTime
		}
		conds = []map[string]any{{"type": cond.Type, "status": cond.Status, "reason": cond.Reason, "message": cond.Message, "lastTransitionTime": t}}
	} else {
		conds = []map[string]any{{"$patch": "delete", "type": Condition}}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.ResourceVersion},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": conds},
	})
	if err != nil {
		return err
	}
	out := &corev1.Service{}
	err = c.core.Patch(types.StrategicMergePatchType).Namespace(s.Namespace).Resource("services").Name(s.Name).
		SubResource("status").Body(patch).Do(ctx).Into(out)
	switch {
	case apierrors.IsNotFound(err):
		c.m.writes.WithLabelValues("conflict").Inc()
		return nil // (gone since: what it held is free)
	case apierrors.IsConflict(err):
		c.m.writes.WithLabelValues("conflict").Inc()
		return errConflict // (planned again from the informer's next event)
	case err != nil:
		c.m.writes.WithLabelValues("error").Inc()
		return err
	}
	c.m.writes.WithLabelValues("ok").Inc()
	c.mu.Lock()
	c.written[s.Key()] = serviceOf(out)
	c.mu.Unlock()
	if len(r.Addrs) > 0 || len(s.Holds) > 0 {
		c.cfg.Log.Info("LoadBalancer IPAM: wrote a Service's addresses", "service", s.Key(), "addresses", r.Addrs, "was", s.Holds)
	}
	return nil
}

// sameCond reports whether the status's condition a says what b says.
func sameCond(a, b *metav1.Condition) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

func trimSemi(s string) string {
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == ';') {
		s = s[:len(s)-1]
	}
	return s
}

// writePool writes a pool's conditions when they changed: its conflict,
// and its counts of addresses.
func (c *controller) writePool(ctx context.Context, obj *LoadBalancerIPPool, p *Pool, u Usage) {
	if obj == nil || !c.el.fresh() {
		return
	}
	conds := slices.Clone(obj.Status.Conditions)
	now := metav1.NewTime(time.Now())
	conflict := metav1.Condition{Type: PoolConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", Message: "no block overlaps another pool's, the cluster's networks or a node's address", LastTransitionTime: now, ObservedGeneration: obj.Generation}
	if p.Conflict != "" {
		conflict.Status, conflict.Reason, conflict.Message = metav1.ConditionTrue, "Conflict", p.Conflict+": no address of the pool is given out until it is fixed"
	}
	meta.SetStatusCondition(&conds, conflict)
	count := func(t string, n float64) {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: "Count",
			Message: strconv.FormatFloat(n, 'f', -1, 64), LastTransitionTime: now, ObservedGeneration: obj.Generation})
	}
	count(PoolIPsTotal, u.Size)
	count(PoolIPsUsed, u.Used)
	count(PoolIPsAvailable, u.Size-u.Used)
	b, _ := json.Marshal(conds)
	have, _ := json.Marshal(obj.Status.Conditions)
	if string(b) == string(have) || c.poolSt[p.Name] == string(b) {
		return
	}
	if err := kubeapi.PatchStatusMerge(ctx, c.poolc, kubeapi.Ref{Resource: Resource, Name: p.Name}, map[string]any{"conditions": conds}); err != nil {
		c.cfg.Log.Warn("LoadBalancer IPAM: cannot write a pool's status", "pool", p.Name, "err", err)
		return
	}
	c.poolSt[p.Name] = string(b)
}

// newer reports whether resourceVersion a is newer than b (the API
// server's are etcd revisions; anything else: not newer).
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
