//go:build !nokube

package addrhold

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

// Kind names one user's Leases: each address's Lease is Prefix followed by
// the address with its dots and colons as dashes
// (cnibox-egress-192-0-2-10), in Namespace, labelled Label (the agents
// watch those) and annotated Label with the address as written.
type Kind struct {
	Prefix, Namespace, Label string
}

// Name is ip's Lease.
func (k Kind) Name(ip netip.Addr) string { return k.Prefix + dashed(ip) }

// dashed is ip with its dots and colons as dashes.
func dashed(ip netip.Addr) string {
	return strings.NewReplacer(".", "-", ":", "-").Replace(ip.String())
}

// Addr is the address a Lease of k is for (its annotation); false when it
// has none that parses.
func (k Kind) Addr(l *coordv1.Lease) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(l.Annotations[k.Label])
	return ip, err == nil
}

// Leases writes the Leases of one Kind for one node.
type Leases struct {
	C        rest.Interface // coordination.k8s.io/v1
	Kind     Kind
	Node     string
	Duration int32 // seconds
}

func (l *Leases) path(name string) string {
	p := "/apis/coordination.k8s.io/v1/namespaces/" + l.Kind.Namespace + "/leases"
	if name != "" {
		p += "/" + name
	}
	return p
}

// ReadRecord is what the election reads of a Lease.
func ReadRecord(o *coordv1.Lease) Record {
	if o == nil {
		return Record{}
	}
	r := Record{Exists: true, Version: o.ResourceVersion}
	if o.Spec.HolderIdentity != nil {
		r.Holder = *o.Spec.HolderIdentity
	}
	return r
}

// Write makes this node ip's holder (take, renew: holder true) or makes
// the Lease holderless (release), if the Lease is still at version (nil
// prev: create it). It returns the Lease as written; a conflict (someone
// wrote it since) returns the error, which Stale matches.
func (l *Leases) Write(ctx context.Context, ip netip.Addr, prev *coordv1.Lease, holder bool) (*coordv1.Lease, error) {
	now := metav1.NewMicroTime(time.Now())
	o := &coordv1.Lease{}
	if prev != nil {
		o = prev.DeepCopy()
	} else {
		o.APIVersion, o.Kind = "coordination.k8s.io/v1", "Lease"
		o.Name, o.Namespace = l.Kind.Name(ip), l.Kind.Namespace
		o.Labels = map[string]string{l.Kind.Label: dashed(ip), "app": "cnibox"}
		o.Annotations = map[string]string{l.Kind.Label: ip.String()}
	}
	id := ""
	if holder {
		id = l.Node
	}
	if holder && (o.Spec.HolderIdentity == nil || *o.Spec.HolderIdentity != l.Node) {
		n := int32(1)
		if o.Spec.LeaseTransitions != nil {
			n += *o.Spec.LeaseTransitions
		}
		o.Spec.LeaseTransitions = &n
		o.Spec.AcquireTime = &now
	}
	o.Spec.HolderIdentity, o.Spec.LeaseDurationSeconds, o.Spec.RenewTime = &id, &l.Duration, &now
	body, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	out := &coordv1.Lease{}
	var raw []byte
	if prev == nil {
		raw, err = l.C.Post().AbsPath(l.path("")).Body(body).SetHeader("Content-Type", "application/json").DoRaw(ctx)
	} else {
		raw, err = l.C.Put().AbsPath(l.path(o.Name)).Body(body).SetHeader("Content-Type", "application/json").DoRaw(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Stale reports whether err says the Lease changed under the write.
func Stale(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// Newer reports whether version a is newer than b: resourceVersions are
// opaque, but the API server's are etcd's revisions, increasing integers;
// anything else counts as newer (the latest read wins).
func Newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return x > y
}
