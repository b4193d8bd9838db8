package lease

import (
	"encoding/json"
	"testing"
)

// TestBackendAttrs: leases of every backend as flanneld v0.28.9 writes them
// into etcd (its lease.LeaseAttrs) keep their type and backend data through
// a round trip, and only vxlan's data is read as VXLAN data.
func TestBackendAttrs(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
		mac           bool
	}{
		{"host-gw", `{"PublicIP":"192.168.77.11","PublicIPv6":null,"BackendType":"host-gw"}`,
			`{"PublicIP":"192.168.77.11","BackendType":"host-gw"}`, false},
		{"alloc", `{"PublicIP":"192.168.77.11","PublicIPv6":null}`, `{"PublicIP":"192.168.77.11"}`, false},
		{"ipip", `{"PublicIP":"192.168.77.11","PublicIPv6":null,"BackendType":"ipip"}`,
			`{"PublicIP":"192.168.77.11","BackendType":"ipip"}`, false},
		{"wireguard", `{"PublicIP":"192.168.77.11","PublicIPv6":null,"BackendType":"wireguard","BackendData":{"PublicKey":"xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=","Port":51820}}`,
			`{"PublicIP":"192.168.77.11","BackendType":"wireguard","BackendData":{"PublicKey":"xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=","Port":51820}}`, false},
		{"wireguard dual", `{"PublicIP":"192.168.77.11","PublicIPv6":"fd00::11","BackendType":"wireguard","BackendData":{"PublicKey":"k","Port":51820},"BackendV6Data":{"PublicKey":"k","Port":51821}}`,
			`{"PublicIP":"192.168.77.11","PublicIPv6":"fd00::11","BackendType":"wireguard","BackendData":{"PublicKey":"k","Port":51820},"BackendV6Data":{"PublicKey":"k","Port":51821}}`, false},
		{"vxlan", `{"PublicIP":"192.168.77.11","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:00"}}`,
			`{"PublicIP":"192.168.77.11","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:00"}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a Attrs
			if err := json.Unmarshal([]byte(tc.in), &a); err != nil {
				t.Fatal(err)
			}
			if (a.VTEPMAC != nil) != tc.mac {
				t.Errorf("VTEPMAC = %v; want one only for vxlan", a.VTEPMAC)
			}
			b, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.out {
				t.Errorf("round trip:\n got %s\nwant %s", b, tc.out)
			}
			var again Attrs
			if err := json.Unmarshal(b, &again); err != nil || !SameData(a, again) {
				t.Errorf("SameData after a round trip = false (%v)", err)
			}
		})
	}
}
