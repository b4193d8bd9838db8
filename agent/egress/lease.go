//go:build !nokube

package egress

import (
	"context"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// LeasePrefix starts the name of every egress address's Lease
// (cnibox-egress-192-0-2-10); the agent's admission policy lets it write
// no other Lease but the whereabouts reclaim's.
const LeasePrefix = "cnibox-egress-"

// LeaseNamespace holds the egress Leases, and nothing else: the agent's
// Lease rights (bin/cnibox.yaml's Role cnibox-egress) are there only.
const LeaseNamespace = "cnibox-egress"

// LeaseLabel is on every egress Lease: the agents watch those.
const LeaseLabel = "cnibox.io/egress-ip"

// leaseName is ip's Lease.
func leaseName(ip netip.Addr) string {
	return LeasePrefix + strings.NewReplacer(".", "-", ":", "-").Replace(ip.String())
}

// leases writes the egress Leases of one namespace.
type leases struct {
	c         rest.Interface // coordination.k8s.io/v1
	namespace string
	node      string
	duration  int32 // seconds
}

func (l *leases) path(name string) string {
	p := "/apis/coordination.k8s.io/v1/namespaces/" + l.namespace + "/leases"
	if name != "" {
		p += "/" + name
	}
	return p
}

// record is what the election reads of a Lease.
func record(o *coordv1.Lease) Record {
	if o == nil {
		return Record{}
	}
	r := Record{Exists: true, Version: o.ResourceVersion}
	if o.Spec.HolderIdentity != nil {
		r.Holder = *o.Spec.HolderIdentity
	}
	return r
}

// write makes this node ip's holder (take, renew: holder true) or makes
// the Lease holderless (release), if the Lease is still at version (""
// for an absent Lease: create it). It returns the Lease as written; a
// conflict (someone wrote it since) returns the error, which
// apierrors.IsConflict or IsAlreadyExists match.
func (l *leases) write(ctx context.Context, ip netip.Addr, prev *coordv1.Lease, holder bool) (*coordv1.Lease, error) {
	now := metav1.NewMicroTime(time.Now())
	o := &coordv1.Lease{}
	if prev != nil {
		o = prev.DeepCopy()
	} else {
		o.APIVersion, o.Kind = "coordination.k8s.io/v1", "Lease"
		o.Name, o.Namespace = leaseName(ip), l.namespace
		o.Labels = map[string]string{LeaseLabel: strings.NewReplacer(".", "-", ":", "-").Replace(ip.String()), "app": "cnibox"}
		o.Annotations = map[string]string{"cnibox.io/egress-ip": ip.String()}
	}
	id := ""
	if holder {
		id = l.node
	}
	if holder && (o.Spec.HolderIdentity == nil || *o.Spec.HolderIdentity != l.node) {
		n := int32(1)
		if o.Spec.LeaseTransitions != nil {
			n += *o.Spec.LeaseTransitions
		}
		o.Spec.LeaseTransitions = &n
		o.Spec.AcquireTime = &now
	}
	o.Spec.HolderIdentity, o.Spec.LeaseDurationSeconds, o.Spec.RenewTime = &id, &l.duration, &now
	body, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	out := &coordv1.Lease{}
	var raw []byte
	if prev == nil {
		raw, err = l.c.Post().AbsPath(l.path("")).Body(body).SetHeader("Content-Type", "application/json").DoRaw(ctx)
	} else {
		raw, err = l.c.Put().AbsPath(l.path(o.Name)).Body(body).SetHeader("Content-Type", "application/json").DoRaw(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

// stale reports whether err says the Lease changed under the write.
func stale(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// newer reports whether version a is newer than b: resourceVersions are
// opaque, but the API server's are etcd's revisions, increasing integers;
// anything else counts as newer (the latest read wins).
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return x > y
}
