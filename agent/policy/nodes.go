package policy

import (
	"reflect"
	"slices"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The `nodes` peer of a ClusterNetworkPolicy (experimental in
// network-policy-api) selects nodes by their labels and takes the
// addresses of their status.addresses (NodeFromAPI). The engine holds the
// cluster's nodes; a set of nodes' addresses is filled from them (fill)
// and follows them here. A node's heartbeats change neither its labels
// nor its addresses, and cost a comparison.

// SetNode adds or replaces a node.
func (e *Engine) SetNode(n *Node) policymodel.Delta {
	old := e.nodes[n.Name]
	e.nodes[n.Name] = n
	return e.moveNode(old, n)
}

// DeleteNode removes the node named name.
func (e *Engine) DeleteNode(name string) policymodel.Delta {
	old := e.nodes[name]
	delete(e.nodes, name)
	return e.moveNode(old, nil)
}

// moveNode updates the sets of nodes' addresses for a node that was old
// and is n (either nil: absent).
func (e *Engine) moveNode(old, n *Node) policymodel.Delta {
	var d policymodel.Delta
	if old != nil && n != nil && reflect.DeepEqual(old.Labels, n.Labels) && slices.Equal(old.IPs, n.IPs) {
		return d
	}
	for id, def := range e.defs {
		if def.nodeSel == nil {
			continue
		}
		e.swap(&d, id, def.nodeElems(old), def.nodeElems(n))
	}
	e.settle(&d)
	return d
}
