//go:build !nokube

package addrhold

import (
	"net/netip"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestElectionReadsOwnLeaseOnly: a Lease of the prefix whose annotation
// names an address but whose name is not that address's (an agent may
// write any Lease of the prefix holding it for its own node) is no
// record of that address, however new: the address's holder stays the
// one its own Lease names.
func TestElectionReadsOwnLeaseOnly(t *testing.T) {
	kind := Kind{Prefix: "cnibox-lb-", Namespace: "cnibox-egress", Label: "cnibox.io/lb-ip"}
	ip := netip.MustParseAddr("192.0.2.10")
	lease := func(name, rv, holder string) *coordv1.Lease {
		return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kind.Namespace, ResourceVersion: rv,
			Annotations: map[string]string{kind.Label: ip.String()}}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}
	}
	st := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, l := range []*coordv1.Lease{lease(kind.Name(ip), "5", "n1"), lease("cnibox-lb-ipam", "9", "n9"), lease("cnibox-lb-192-0-2-11", "10", "n9")} {
		if err := st.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	e := NewElection(Config{T: DefaultTiming, Leases: &Leases{Kind: kind, Node: "n2"}, Fence: &Fence{}})
	e.Read(st)
	if got := ReadRecord(e.Record(ip)); got.Holder != "n1" || got.Version != "5" {
		t.Errorf("%s's record: %+v, want n1's at version 5 (its own Lease %s)", ip, got, kind.Name(ip))
	}
	if kind.Name(ip) != "cnibox-lb-192-0-2-10" {
		t.Errorf("the Lease's name: %s", kind.Name(ip))
	}
}
