package services

import (
	"slices"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The topology modes the hints may put a port in.
const (
	topoNone     = ""
	topoSameZone = "PreferSameZone"
	topoSameNode = "PreferSameNode"
)

// categorize chooses a port's endpoints as kube-proxy's
// CategorizeEndpoints does: cluster endpoints (when the port ever uses
// them) are the ready ones the topology mode allows, else, when no ready
// one is left anywhere, the serving and terminating ones; local endpoints
// (when the port ever uses them) are this node's ready ones, else its
// serving and terminating ones. usable: some endpoint is usable somewhere in
// the cluster (ready, or serving and terminating).
func categorize(eps []endpoint, usesCluster, usesLocal bool, node Node) (cluster, local []svcmodel.Endpoint, usable bool) {
	if len(eps) == 0 {
		return nil, nil, false
	}
	if usesCluster {
		mode := topologyMode(eps, node)
		cluster = pick(eps, func(e endpoint) bool { return e.Ready && availableFor(e, mode, node) })
		if len(cluster) == 0 {
			// No ready endpoint anywhere (the mode falls back to none
			// when none is ready for this node or zone).
			cluster = pick(eps, func(e endpoint) bool { return e.Serving && e.Terminating })
		}
		usable = len(cluster) > 0
	}
	if !usesLocal {
		return cluster, nil, usable
	}
	var localReady, localServingTerminating bool
	for _, e := range eps {
		switch {
		case e.Ready:
			usable = true
			localReady = localReady || e.Local
		case e.Serving && e.Terminating:
			usable = true
			localServingTerminating = localServingTerminating || e.Local
		}
	}
	switch {
	case localReady:
		local = pick(eps, func(e endpoint) bool { return e.Local && e.Ready })
	case localServingTerminating:
		local = pick(eps, func(e endpoint) bool { return e.Local && e.Serving && e.Terminating })
	}
	return cluster, local, usable
}

// topologyMode is the mode the hints of the ready endpoints allow, all or
// nothing as kube-proxy reads them: PreferSameNode when every ready
// endpoint has a node hint and one is for this node; else PreferSameZone
// when every ready endpoint has a zone hint and one is for this node's
// zone; else none (every ready endpoint).
func topologyMode(eps []endpoint, node Node) string {
	ready, allNode, forNode, allZone, forZone := false, true, false, true, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		ready = true
		if len(e.nodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.nodeHints, node.Name) {
			forNode = true
		}
		if len(e.zoneHints) == 0 {
			allZone = false
		} else if slices.Contains(e.zoneHints, node.Zone) {
			forZone = true
		}
	}
	switch {
	case !ready:
		return topoNone
	case allNode && forNode:
		return topoSameNode
	case allZone && forZone:
		return topoSameZone
	}
	return topoNone
}

// availableFor reports whether mode lets this node use e.
func availableFor(e endpoint, mode string, node Node) bool {
	switch mode {
	case topoSameNode:
		return slices.Contains(e.nodeHints, node.Name)
	case topoSameZone:
		return slices.Contains(e.zoneHints, node.Zone)
	}
	return true
}

// pick is the endpoints of eps that keep says to keep.
func pick(eps []endpoint, keep func(endpoint) bool) []svcmodel.Endpoint {
	var out []svcmodel.Endpoint
	for _, e := range eps {
		if keep(e) {
			out = append(out, e.Endpoint)
		}
	}
	return out
}
