package svcmodel

import (
	"net/netip"
	"slices"
)

// FrontendOf names the Service port a connection of proto to dst went to
// (the flow log's "service", from the connection's original destination):
// a ClusterIP, externalIP or load balancer frontend at dst, else a
// NodePort of dst's port when dst is one of NodePortAddrs. ok false: no
// frontend of the snapshot is dst. It walks the snapshot: a reader of a
// few names a second, not a data path.
func (s *Snapshot) FrontendOf(proto Proto, dst netip.AddrPort) (name PortName, ok bool) {
	if s == nil {
		return PortName{}, false
	}
	a := dst.Addr().Unmap()
	nodePort := slices.ContainsFunc(s.NodePortAddrs, func(n netip.Addr) bool { return n.Unmap() == a })
	for sp := range s.All() {
		if sp.Protocol != proto || sp.Family != FamilyOf(a) {
			continue
		}
		for _, fe := range sp.Frontends {
			if fe.Port != dst.Port() {
				continue
			}
			if fe.Kind == NodePort && nodePort || fe.Kind != NodePort && fe.Addr.Unmap() == a {
				return sp.Name, true
			}
		}
	}
	return PortName{}, false
}
