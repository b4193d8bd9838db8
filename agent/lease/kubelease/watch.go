package kubelease

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
)

// MetaLabel marks a node whose annotations hold its whole lease, the
// podCIDRs included (Annotations.PodCIDRs): cnibox-agent sets both when it
// publishes. Peers watch such nodes by their metadata only, so a kubelet's
// status report of one (conditions, images: most of a Node's bytes) reaches
// each agent as a metadata event, about a quarter of the Node. Nodes without
// the label (flanneld's, older agents') are watched whole, as before.
const MetaLabel = "cnibox.io/overlay-metadata"

// Watch runs two node informers, one of the nodes with MetaLabel (metadata
// only) and one of the others (whole Nodes, for the podCIDR): a snapshot
// once both have synced, then the changes. A node that gains the label
// leaves one informer and enters the other, in either order: while the
// metadata informer has a node, its view of it wins.
func (m *Manager) Watch(ctx context.Context, fn func(lease.Update)) error {
	var (
		mu     sync.Mutex
		synced bool
		views  = [2]map[string]*kubeapi.Node{{}, {}} // per informer: whole, metadata
		// sent is what was delivered per node, as a summary: the agent
		// keeps the peers' leases, a second copy here was 2 MB at 5,000
		// nodes. first holds the whole leases until the snapshot.
		sent  = map[string]leaseSum{}
		first = map[string]lease.Lease{}
	)
	// settle delivers what changed for a node after one informer's event.
	settle := func(name string) {
		cur := views[1][name]
		if cur == nil {
			cur = views[0][name]
		}
		prev, had := sent[name]
		if cur == nil {
			if had {
				delete(sent, name)
				delete(first, name)
				if synced {
					fn(lease.Update{Events: []lease.Event{{Type: lease.Removed, Lease: lease.Lease{Subnet: prev.sn4, Subnet6: prev.sn6}}}})
				}
			}
			return
		}
		l, err := m.nodeLease(cur, true)
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
	handle := func(src int, del bool, obj any) {
		n, ok := obj.(*kubeapi.Node)
		if !ok {
			if d, isDel := obj.(cache.DeletedFinalStateUnknown); isDel {
				n, ok = d.Obj.(*kubeapi.Node)
			}
			if !ok {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if del {
			delete(views[src], n.Name)
		} else {
			views[src][n.Name] = n
		}
		settle(n.Name)
	}
	sources := []struct {
		lw  cache.ListerWatcher
		obj runtime.Object
	}{
		{m.listWatch(false, "!"+MetaLabel), &kubeapi.Node{}},
		{m.listWatch(true, MetaLabel), &metav1.PartialObjectMetadata{}},
	}
	var synceds []cache.InformerSynced
	for i, s := range sources {
		_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: s.lw,
			ObjectType:    s.obj,
			Transform:     m.transform,
			ResyncPeriod:  resyncPeriod,
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { handle(i, false, obj) },
				UpdateFunc: func(_, obj any) { handle(i, false, obj) },
				DeleteFunc: func(obj any) { handle(i, true, obj) },
			},
		})
		synceds = append(synceds, ctrl.HasSynced)
		go ctrl.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synceds...) {
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
