//go:build !nokube

package kubelease

import (
	"net/netip"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/netconf"
)

// TestPeerLease: a peer's lease read from what the informer cache keeps
// of its Node (pod CIDRs, the annotations of Annotations.Peers) is the
// lease read from the whole Node; a node no overlay agent manages, or
// without a pod CIDR, is none.
func TestPeerLease(t *testing.T) {
	an, _ := NewAnnotations(DefaultAnnotationPrefix)
	m := &Manager{an: an, cfg: &netconf.Config{EnableIPv4: true, EnableIPv6: true}}
	ann := map[string]string{an.SubnetKubeManaged: "true", an.BackendType: "vxlan",
		an.BackendData: `{"VNI":1,"VtepMAC":"0a:58:0a:00:00:01"}`, an.PublicIP: "192.0.2.1",
		an.BackendV6Data: `{"VNI":1,"VtepMAC":"0a:58:0a:00:00:02"}`, an.PublicIPv6: "2001:db8::1"}
	whole := &kubeapi.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: ann},
		Spec: kubeapi.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:1::/64"}}}
	want, err := m.nodeLease(whole, true)
	if err != nil {
		t.Fatal(err)
	}
	slim := &cluster.Node{Name: "n1", Annotations: ann,
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}}
	got, err := m.peerLease(slim)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("peer lease from the cache %+v, %v; want %+v", got, err, want)
	}
	if !want.Subnet.IsValid() || !want.Subnet6.IsValid() || want.Attrs.VNI != 1 || !want.Attrs.PublicIPv6.IsValid() {
		t.Errorf("the lease read %+v: want both families' subnets and VXLAN data", want)
	}
	unmanaged := *slim
	unmanaged.Annotations = map[string]string{an.BackendType: "vxlan"}
	noCIDR := *slim
	noCIDR.PodCIDRs = nil
	for name, n := range map[string]*cluster.Node{"unmanaged": &unmanaged, "no pod CIDR": &noCIDR} {
		if l, err := m.peerLease(n); err == nil {
			t.Errorf("%s node: lease %+v, want none", name, l)
		}
	}
}
