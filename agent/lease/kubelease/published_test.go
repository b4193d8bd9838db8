//go:build !nokube

package kubelease

import (
	"encoding/json"
	"net"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
)

// TestPublished: the node annotations each backend publishes, as flanneld
// v0.28.9's kubeSubnetManager.AcquireLease writes them: backend-data
// "null" for host-gw, ipip and alloc (IPv4), wireguard's key and port,
// IPv6 data only for vxlan and wireguard with data and for host-gw; the
// public-ip-overwrite annotation wins.
func TestPublished(t *testing.T) {
	an, err := NewAnnotations("flannel.alpha.coreos.com")
	if err != nil {
		t.Fatal(err)
	}
	p := "flannel.alpha.coreos.com/"
	v4, v6 := netip.MustParseAddr("192.168.77.11"), netip.MustParseAddr("fd00:77::11")
	wg := json.RawMessage(`{"PublicKey":"k","Port":51820}`)
	wg6 := json.RawMessage(`{"PublicKey":"k","Port":51821}`)
	mac, _ := net.ParseMAC("0a:58:0a:f4:01:00")
	for _, tc := range []struct {
		name  string
		attrs lease.Attrs
		over  string // public-ip-overwrite
		want  map[string]string
	}{
		{"host-gw", lease.Attrs{PublicIP: v4, BackendType: "host-gw"}, "",
			map[string]string{"backend-type": "host-gw", "backend-data": "null", "public-ip": "192.168.77.11"}},
		{"host-gw dual stack", lease.Attrs{PublicIP: v4, PublicIPv6: v6, BackendType: "host-gw"}, "",
			map[string]string{"backend-type": "host-gw", "backend-data": "null", "public-ip": "192.168.77.11", "backend-v6-data": "null", "public-ipv6": "fd00:77::11"}},
		{"wireguard", lease.Attrs{PublicIP: v4, BackendType: "wireguard", Data: wg}, "",
			map[string]string{"backend-type": "wireguard", "backend-data": string(wg), "public-ip": "192.168.77.11"}},
		{"wireguard dual stack", lease.Attrs{PublicIP: v4, PublicIPv6: v6, BackendType: "wireguard", Data: wg, Data6: wg6}, "",
			map[string]string{"backend-type": "wireguard", "backend-data": string(wg), "public-ip": "192.168.77.11", "backend-v6-data": string(wg6), "public-ipv6": "fd00:77::11"}},
		{"ipip dual-stack node", lease.Attrs{PublicIP: v4, PublicIPv6: v6, BackendType: "ipip"}, "",
			map[string]string{"backend-type": "ipip", "backend-data": "null", "public-ip": "192.168.77.11"}},
		{"alloc", lease.Attrs{PublicIP: v4}, "",
			map[string]string{"backend-type": "", "backend-data": "null", "public-ip": "192.168.77.11"}},
		{"vxlan", lease.Attrs{PublicIP: v4, BackendType: "vxlan", VNI: 1, VTEPMAC: mac}, "",
			map[string]string{"backend-type": "vxlan", "backend-data": `{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:00"}`, "public-ip": "192.168.77.11"}},
		{"host-gw overwritten", lease.Attrs{PublicIP: v4, BackendType: "host-gw"}, "203.0.113.5",
			map[string]string{"backend-type": "host-gw", "backend-data": "null", "public-ip": "203.0.113.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &kubeapi.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{}}}
			if tc.over != "" {
				n.Annotations[p+"public-ip-overwrite"] = tc.over
			}
			got := an.published(n, tc.attrs)
			want := map[string]string{p + "kube-subnet-manager": "true"}
			for k, v := range tc.want {
				want[p+k] = v
			}
			if len(got) != len(want) {
				t.Errorf("published %v; want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q; want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}
