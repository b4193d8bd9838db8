package netconf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBackends: every backend type of flannel's with its options and
// flannel's defaults (pkg/backend/*: wireguard's ListenPort 51820,
// ListenPortV6 51821, Mode separate, PersistentKeepaliveInterval in
// seconds), the types matched case-insensitively as flannel's manager
// does, and the refused ones saying why and what to use.
func TestBackends(t *testing.T) {
	psk := "mMiHW8VpRyNqm6GQMBz0qj3rEBcbxBsV/mfwKo1OB0w="
	for _, tc := range []struct {
		name, backend string
		want          Backend
		ipv6          bool
		err           []string // substrings of the error
	}{
		{name: "host-gw", backend: `{"Type": "host-gw"}`, want: Backend{Type: TypeHostGW}},
		{name: "host-gw upper case", backend: `{"Type": "Host-GW"}`, want: Backend{Type: TypeHostGW}},
		{name: "host-gw dual stack", backend: `{"Type": "host-gw"}`, ipv6: true, want: Backend{Type: TypeHostGW}},
		{name: "alloc", backend: `{"Type": "alloc"}`, want: Backend{Type: TypeAlloc}},
		{name: "ipip", backend: `{"Type": "ipip"}`, want: Backend{Type: TypeIPIP}},
		{name: "ipip direct", backend: `{"Type": "ipip", "DirectRouting": true}`, want: Backend{Type: TypeIPIP, DirectRouting: true}},
		{name: "ipip ipv6", backend: `{"Type": "ipip"}`, ipv6: true, err: []string{"IPv4 only", "EnableIPv6"}},
		{name: "wireguard defaults", backend: `{"Type": "wireguard"}`,
			want: Backend{Type: TypeWireGuard, ListenPort: 51820, ListenPortV6: 51821, Mode: ModeSeparate}},
		{name: "wireguard all options", backend: `{"Type": "wireguard", "ListenPort": 51000, "ListenPortV6": 51001, "MTU": 1400,
			"PSK": "` + psk + `", "PersistentKeepaliveInterval": 25, "Mode": "auto"}`,
			want: Backend{Type: TypeWireGuard, ListenPort: 51000, ListenPortV6: 51001, MTU: 1400, PSK: psk, PersistentKeepaliveInterval: 25 * time.Second, Mode: ModeAuto}},
		{name: "wireguard lower-case keys", backend: `{"type": "wireguard", "listenport": 51000, "mode": "ipv6"}`,
			want: Backend{Type: TypeWireGuard, ListenPort: 51000, ListenPortV6: 51821, Mode: ModeIPv6}},
		{name: "wireguard bad mode", backend: `{"Type": "wireguard", "Mode": "both"}`, err: []string{"Backend.Mode", "separate", "auto"}},
		{name: "wireguard bad psk", backend: `{"Type": "wireguard", "PSK": "secret"}`, err: []string{"Backend.PSK", "wg genpsk"}},
		{name: "wireguard keepalive string", backend: `{"Type": "wireguard", "PersistentKeepaliveInterval": "25s"}`, err: []string{"number of seconds"}},
		{name: "wireguard port", backend: `{"Type": "wireguard", "ListenPort": 70000}`, err: []string{"Backend.ListenPort 70000"}},
		{name: "wireguard mtu", backend: `{"Type": "wireguard", "MTU": 100}`, err: []string{"Backend.MTU 100", "148..65535"}},
		{name: "vxlan", backend: `{"Type": "vxlan", "DirectRouting": true}`, want: Backend{Type: TypeVXLAN, VNI: 1, Port: 8472, DirectRouting: true}},
		{name: "udp", backend: `{"Type": "udp"}`, err: []string{`"udp" is not supported`, "user space", `use "vxlan"`}},
		{name: "ipsec", backend: `{"Type": "ipsec", "PSK": "x"}`, err: []string{`"ipsec" is not supported`, "strongSwan", `use "wireguard"`}},
		{name: "tencent-vpc", backend: `{"Type": "tencent-vpc"}`, err: []string{`"tencent-vpc" is not supported`, "Tencent Cloud", "keep flanneld"}},
		{name: "unknown", backend: `{"Type": "gre"}`, err: []string{`"gre" is not a flannel backend`, "host-gw, wireguard, ipip, alloc"}},
		{name: "no type", backend: `{}`, err: []string{"Backend.Type is missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := `{"Network": "10.244.0.0/16", "Backend": ` + tc.backend + `}`
			if tc.ipv6 {
				conf = `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": ` + tc.backend + `}`
			}
			c, err := Parse([]byte(conf))
			if tc.err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse = %v; want ErrInvalid", err)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Backend != tc.want {
				t.Errorf("Backend = %+v; want %+v", c.Backend, tc.want)
			}
		})
	}
}
