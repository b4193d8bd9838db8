//go:build !nokube

package policy

import (
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// handler turns informer events into engine changes: the agent's cache's
// (pods, namespaces, nodes) and the watcher's own (the policies).
func (w *watcher) handler() cache.ResourceEventHandler {
	set := func(obj any) {
		switch o := obj.(type) {
		case *cluster.Pod:
			w.applyIf(func(e *Engine) policymodel.Delta {
				w.podEventLocked()
				return e.SetPod(w.podFromInformer(o))
			}, o.Node == w.e.node && len(o.IPs) > 0)
		case *cluster.Namespace:
			ns := NamespaceOf(o)
			w.apply(func(e *Engine) policymodel.Delta {
				w.ref(namespaceIssueID(o.Name), namespaceRef(o)) // its caps' Events
				return e.SetNamespace(ns)
			})
			w.warnFlowLog(o, ns)
		case *cluster.Node:
			w.apply(func(e *Engine) policymodel.Delta { return e.SetNode(NodeOf(o)) })
		case *networkingv1.NetworkPolicy:
			w.setPolicy(policymodel.NetworkPolicyID(o.Namespace, o.Name), objectRef("networking.k8s.io/v1", "NetworkPolicy", &o.ObjectMeta),
				func() *compiled { return compileNP(o) })
		case *cnpv1.ClusterNetworkPolicy:
			w.setPolicy(policymodel.ClusterPolicyID(o.Name), objectRef(w.cnpVersion, "ClusterNetworkPolicy", &o.ObjectMeta),
				func() *compiled { return compileCNP(o) })
		case *StagedNetworkPolicy: // compiled as the enforced kinds are: outside the lock
			w.setPolicy(stagedNPPrefix+o.Namespace+"/"+o.Name, objectRef(StagedGroupVersion().String(), "StagedNetworkPolicy", &o.ObjectMeta),
				func() *compiled {
					return compileStagedNP(&networkingv1.NetworkPolicy{ObjectMeta: o.ObjectMeta, Spec: o.Spec})
				})
		case *StagedClusterNetworkPolicy:
			w.setPolicy(stagedCNPPrefix+o.Name, objectRef(StagedGroupVersion().String(), "StagedClusterNetworkPolicy", &o.ObjectMeta),
				func() *compiled {
					return compileStagedCNP(&cnpv1.ClusterNetworkPolicy{ObjectMeta: o.ObjectMeta, Spec: o.Spec})
				})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj) },
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			switch o := obj.(type) {
			case *cluster.Pod:
				w.apply(func(e *Engine) policymodel.Delta {
					delete(w.admitted, o.Key())
					return e.DeletePod(o.Namespace, o.Name)
				})
			case *cluster.Namespace:
				w.apply(func(e *Engine) policymodel.Delta {
					w.ref(namespaceIssueID(o.Name), nil)
					return e.DeleteNamespace(o.Name)
				})
			case *cluster.Node:
				w.apply(func(e *Engine) policymodel.Delta { return e.DeleteNode(o.Name) })
			case *networkingv1.NetworkPolicy:
				w.deletePolicy(policymodel.NetworkPolicyID(o.Namespace, o.Name), func(e *Engine) policymodel.Delta { return e.DeleteNetworkPolicy(o.Namespace, o.Name) })
			case *cnpv1.ClusterNetworkPolicy:
				w.deletePolicy(policymodel.ClusterPolicyID(o.Name), func(e *Engine) policymodel.Delta { return e.DeleteClusterNetworkPolicy(o.Name) })
			case *StagedNetworkPolicy:
				w.deletePolicy(stagedNPPrefix+o.Namespace+"/"+o.Name, func(e *Engine) policymodel.Delta {
					return e.DeleteStagedNetworkPolicy(o.Namespace, o.Name)
				})
			case *StagedClusterNetworkPolicy:
				w.deletePolicy(stagedCNPPrefix+o.Name, func(e *Engine) policymodel.Delta { return e.DeleteStagedClusterNetworkPolicy(o.Name) })
			}
		},
	}
}
