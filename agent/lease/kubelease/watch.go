//go:build !nokube

package kubelease

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"net/netip"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/lease"
)

// MetaLabel marks a node whose annotations hold its whole lease, the
// podCIDRs included (Annotations.PodCIDRs): cnibox-agent sets both when it
// publishes. Agents before the informer cache watched such nodes by their
// metadata only; this one reads every node from the agent's informer cache
// (agent/cluster), which the NetworkPolicy watcher and the egress gateways
// read too. The label and the annotation are still published, for the
// older agents of a cluster being upgraded.
const MetaLabel = "cnibox.io/overlay-metadata"

// Watch reads the nodes from the agent's informer cache (Config.Cache: one
// list and one watch of the nodes whoever reads them; the cache keeps of
// each node the pod CIDRs and the annotations this backend reads): a
// snapshot once the cache has handed every node, then the changes.
func (m *Manager) Watch(ctx context.Context, fn func(lease.Update)) error {
	var (
		mu     sync.Mutex
		synced bool
		// sent is what was delivered per node, as a summary: the agent
		// keeps the peers' leases, a second copy here was 2 MB at 5,000
		// nodes. first holds the whole leases until the snapshot.
		sent  = map[string]leaseSum{}
		first = map[string]lease.Lease{}
	)
	// settle delivers what changed for node name, now n (nil: gone).
	settle := func(name string, n *cluster.Node) {
		prev, had := sent[name]
		if n == nil {
			if had {
				delete(sent, name)
				delete(first, name)
				if synced {
					fn(lease.Update{Events: []lease.Event{{Type: lease.Removed, Lease: lease.Lease{Subnet: prev.sn4, Subnet6: prev.sn6}}}})
				}
			}
			return
		}
		l, err := m.peerLease(n)
		if err != nil {
			return // as before: a node whose lease becomes unreadable stays as it was
		}
		sum := summarize(l)
		if had && sum == prev {
			return
		}
		sent[name] = sum
		if synced {
			fn(lease.Update{Events: []lease.Event{{Type: lease.Added, Lease: l}}})
		} else {
			first[name] = l
		}
	}
	handle := func(del bool, obj any) {
		n, ok := obj.(*cluster.Node)
		if !ok {
			if d, isDel := obj.(cache.DeletedFinalStateUnknown); isDel {
				n, ok = d.Obj.(*cluster.Node)
			}
			if !ok {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if del {
			settle(n.Name, nil)
		} else {
			settle(n.Name, n)
		}
	}
	h, err := m.cache.Handle(cluster.Nodes, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(false, obj) },
		UpdateFunc: func(_, obj any) { handle(false, obj) },
		DeleteFunc: func(obj any) { handle(true, obj) },
	})
	if err != nil {
		return fmt.Errorf("kube: watch the nodes: %w", err)
	}
	defer h.Stop()
	if m.ownCache {
		m.cache.Start(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), h.HasSynced) {
		return ctx.Err()
	}
	mu.Lock()
	synced = true
	snap := lease.Update{Snapshot: true}
	for _, l := range first {
		snap.Leases = append(snap.Leases, l)
	}
	first = nil
	fn(snap)
	mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// leaseSum is what Watch remembers of a delivered lease: its subnets (a
// removal names them) and a hash of every field that programs the peer.
type leaseSum struct {
	sn4, sn6 netip.Prefix
	sum      uint64
}

// sumSeed makes the hashes of one process comparable.
var sumSeed = maphash.MakeSeed()

// summarize returns l's summary: two leases with the same one program the
// same peer (a 64-bit hash of the subnets, addresses, backend type, VXLAN
// data and the published backend documents).
func summarize(l lease.Lease) leaseSum {
	var h maphash.Hash
	h.SetSeed(sumSeed)
	x := l.Attrs
	for _, b := range [][]byte{
		[]byte(l.Subnet.String()), []byte(l.Subnet6.String()), []byte(x.PublicIP.String()), []byte(x.PublicIPv6.String()),
		[]byte(x.BackendType), []byte(strconv.Itoa(x.VNI)), x.VTEPMAC, []byte(strconv.Itoa(x.VNI6)), x.VTEPMAC6,
		x.DataJSON(false), x.DataJSON(true),
	} {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	return leaseSum{sn4: l.Subnet, sn6: l.Subnet6, sum: h.Sum64()}
}
