package portmap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/portmap"
)

// TestPortmapHostIPNotLocal is issue 48's capture: a pod asks for a hostIP
// that is another machine's address (a DNS server, the cluster's API
// service). ADD refuses it with code 7 naming the field, the value and the
// fix, and leaves nothing in table inet cnibox-portmap nor in the store,
// also when an earlier entry of the same request was valid; CHECK refuses
// it the same way; DEL (twice) succeeds.
func TestPortmapHostIPNotLocal(t *testing.T) {
	n := newPMNode(t)
	for _, tc := range []struct {
		name  string
		maps  []pmMap
		field string
		value string
	}{
		{"DNS", []pmMap{{HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "198.51.100.53"}},
			"runtimeConfig.portMappings[0].hostIP", "198.51.100.53"},
		{"API service", []pmMap{{HostPort: 443, ContainerPort: 8443, HostIP: "10.96.0.1"}},
			"runtimeConfig.portMappings[0].hostIP", "10.96.0.1"},
		{"after a valid entry", []pmMap{{HostPort: 8080, ContainerPort: 80}, {HostPort: 8081, ContainerPort: 80, HostIP: pmNodeIP4.String()},
			{HostPort: 443, ContainerPort: 8443, HostIP: "10.96.0.1"}},
			"runtimeConfig.portMappings[2].hostIP", "10.96.0.1"},
		{"IPv6", []pmMap{{HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "2001:db8::53"}},
			"runtimeConfig.portMappings[0].hostIP", "2001:db8::53"},
		{"a neighbour on the node's subnet", []pmMap{{HostPort: 80, ContainerPort: 80, HostIP: pmRemoteIP4.String()}},
			"runtimeConfig.portMappings[0].hostIP", pmRemoteIP4.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := n.newPod("capture")
			prev := n.must(bridge.Role, "ADD", p, n.bridgeConf("1.1.0"))
			conf := n.portmapConf("1.1.0", tc.maps, prev, nil)
			for _, cmd := range []string{"ADD", "CHECK"} {
				_, err := n.call(portmap.Role, cmd, p, conf)
				var ce *cniplug.CodedError
				if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig {
					t.Fatalf("%s: error %v (code %d); want code 7", cmd, err, cniplug.CodeOf(err))
				}
				for _, want := range []string{tc.field, tc.value, "not an address of this node", "0.0.0.0"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not say %q", cmd, err, want)
					}
				}
			}
			if es := pmEntries(t); len(es) != 0 {
				t.Errorf("elements after the refused ADD: %+v", es)
			}
			if r, ok := n.records()[p.id]; ok {
				t.Errorf("record after the refused ADD: %+v", r)
			}
			n.down(p, "1.1.0", tc.maps, prev)
		})
	}
}

// TestPortmapHostIPGone: a mapping on an address the node had at ADD; the
// address goes. CHECK then refuses it as ADD would (code 7), and DEL
// (twice) still succeeds and removes the elements and the record.
func TestPortmapHostIPGone(t *testing.T) {
	n := newPMNode(t)
	extra := netip.MustParsePrefix("192.168.212.77/24")
	host, err := netops.Open("")
	pmMust(t, err)
	defer host.Close()
	pmMust(t, host.EnsureAddr("pmlink0", extra, netops.AddrOpts{}))
	p := n.newPod("gone")
	maps := []pmMap{{HostPort: 8980, ContainerPort: 80, HostIP: extra.Addr().String()}}
	prev := n.up(p, "1.1.0", maps, nil)
	pmServeHTTP(t, p, 80)
	if body, err := pmGet(t, n.remote, extra.Addr(), 8980); err != nil || body != p.id+" "+pmRemoteIP4.String() {
		t.Fatalf("GET %s:8980 from the remote host = %q, %v", extra.Addr(), body, err)
	}
	n.must(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))

	pmMust(t, host.DeleteAddr("pmlink0", extra))
	_, err = n.call(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))
	if code := cniplug.CodeOf(err); code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "runtimeConfig.portMappings[0].hostIP") {
		t.Errorf("CHECK after the address went: %v (code %d); want code 7 naming the hostIP", err, code)
	}
	n.down(p, "1.1.0", maps, prev)
	if es := pmEntries(t); len(es) != 0 {
		t.Errorf("elements after DEL: %+v", es)
	}
	if r, ok := n.records()[p.id]; ok {
		t.Errorf("record after DEL: %+v", r)
	}
}
