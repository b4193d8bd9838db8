//go:build !nokube

package podapi

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// reproNAD is issue 48's reproduction: a team-a NAD whose macvlan takes
// the pod's eth0 (no master), keeps its MAC (passthru) and claims the
// bridge's address.
const reproNAD = `{"cniVersion":"1.0.0","name":"spoof","type":"macvlan","linkInContainer":true,"mode":"passthru",` +
	`"ipam":{"type":"static","addresses":[{"address":"10.99.0.1/32"}]}}`

// wantPolicy reports whether err is a Policy refusal naming field (as the
// message writes it: "field <path> ").
func wantPolicy(err error, field string) bool {
	var ae *agentapi.Error
	return errors.As(err, &ae) && ae.Reason == agentapi.ReasonPolicy && strings.Contains(ae.Msg, "field "+field+" ")
}

// TestNADSpoofRefused: what lets a pod of an untrusted namespace capture or
// forge another address's traffic is refused, naming the field: a lower
// device on the pod's veth into the node (linkInContainer without master,
// or master eth0), passthru, a MAC chosen by the NAD or the pod, the
// forwarding and proxy sysctls (tuning's and args.cni's, in any case);
// the same NADs of a trusted namespace are served as before.
func TestNADSpoofRefused(t *testing.T) {
	s := newNADServer(t, "kube-system")
	for _, tc := range []struct{ config, field string }{
		{reproNAD, "linkInContainer"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"net1","mode":"passthru","ipam":{"type":"static"}}`, "mode"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"net1","mode":"PassThru"}`, "mode"},
		{`{"cniVersion":"1.0.0","name":"n","type":"ipvlan","linkInContainer":true,"master":"eth0","ipam":{"type":"static"}}`, "master"},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"vlan","vlanId":3,"LinkInContainer":true}]}`, "plugins[0].LinkInContainer"},
		{`{"cniVersion":"1.0.0","name":"n","type":"vlan","vlanId":3,"linkInContainer":true,"master":""}`, "master"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"net1","allowVethMaster":true}`, "allowVethMaster"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"net1","mac":"0a:58:0a:63:00:01"}`, "mac"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tap","MAC":"0a:58:0a:63:00:01"}`, "MAC"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"args":{"cni":{"mac":"0a:58:0a:63:00:01"}}}`, "args.cni.mac"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"capabilities":{"mac":true}}`, "capabilities.mac"},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","ipam":{"type":"static"}},{"type":"tuning","sysctl":{"net.ipv4.ip_forward":"1"}}]}`, "plugins[1].sysctl.net.ipv4.ip_forward"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"net.ipv4.conf.all.forwarding":"1"}}`, "sysctl.net.ipv4.conf.all.forwarding"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"net.ipv6.conf.IFNAME.forwarding":"1"}}`, "sysctl.net.ipv6.conf.IFNAME.forwarding"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"net.ipv4.conf.eth0.100.proxy_arp":"1"}}`, "sysctl.net.ipv4.conf.eth0.100.proxy_arp"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"Net.IPv6.Conf.default.Proxy_NDP":"1"}}`, "sysctl.Net.IPv6.Conf.default.Proxy_NDP"},
		{`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.route_localnet":"1"}}`, "sysctl.net.ipv4.conf.IFNAME.route_localnet"},
		{`{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"static"},"args":{"cni":{"sysctl":{"net.ipv4.ip_forward":"1"}}}}`, "args.cni.sysctl.net.ipv4.ip_forward"},
	} {
		if _, err := s.ask("team-a", "spoof", tc.config); !wantPolicy(err, tc.field) {
			t.Errorf("team-a: %s: %v; want reason Policy naming field %s", tc.config, err, tc.field)
		}
		if nad, err := s.ask("kube-system", "spoof", tc.config); err != nil || nad.Config != tc.config {
			t.Errorf("kube-system (trusted): %s: %v; want it served as before", tc.config, err)
		}
	}
	// What stays in the pod is still served to team-a: a named master
	// that is not eth0, the other modes, sysctls that do not forward.
	for _, config := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"macvlan","linkInContainer":true,"master":"dummy0","mode":"bridge","ipam":{"type":"static","addresses":[{"address":"10.99.0.1/32"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"ipvlan","linkInContainer":true,"master":"net2","mode":"l2"}`,
		`{"cniVersion":"1.0.0","name":"n","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1","net.core.somaxconn":"512","net.ipv4.ip_forward_use_pmtu":"0"}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"tap","owner":1000,"ipam":{"type":"static","addresses":[{"address":"10.4.0.2/24"}]}}`,
	} {
		if _, err := s.ask("team-a", "ok", config); err != nil {
			t.Errorf("team-a: %s: %v; want it served", config, err)
		}
	}
}

// TestNADCNIArgsMerged: a pod's cni-args cannot add to a NAD of an
// untrusted namespace what the NAD could not say itself (a forwarding
// sysctl, a MAC, a node path, an unknown field), and cannot ask any NAD
// for what a capability gives (ips, mac, portMappings in any case) unless
// a plugin declares it; what the allowlist takes passes.
func TestNADCNIArgsMerged(t *testing.T) {
	s := newNADServer(t, "kube-system")
	tuning := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"dummy","capabilities":{"ips":true},"ipam":{"type":"static"}},{"type":"tuning"}]}`
	ask := func(ns string, args map[string]any) error {
		s.mu.Lock()
		s.nads[ns+"/args"] = tuning
		s.mu.Unlock()
		_, err := s.client.NetAttachDefArgs(context.Background(), ns, ns, "args", args)
		return err
	}
	for _, tc := range []struct {
		args  map[string]any
		field string // "" = served
	}{
		{map[string]any{"sysctl": map[string]any{"net.ipv4.ip_forward": "1"}}, "plugins[0].args.cni.sysctl.net.ipv4.ip_forward"},
		{map[string]any{"sysctl": map[string]any{"net.ipv4.conf.IFNAME.proxy_arp": "1"}}, "plugins[0].args.cni.sysctl.net.ipv4.conf.IFNAME.proxy_arp"},
		{map[string]any{"dataDir": secret}, "plugins[0].args.cni.dataDir"},
		{map[string]any{"whatever": 1}, "plugins[0].args.cni.whatever"},
		{map[string]any{"mtu": 1400, "sysctl": map[string]any{"net.core.somaxconn": "9"}, "ips": []any{"10.5.0.2/24"}}, ""},
	} {
		err := ask("team-a", tc.args)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("team-a cni-args %v: %v; want it served", tc.args, err)
		case tc.field != "" && !wantPolicy(err, tc.field):
			t.Errorf("team-a cni-args %v: %v; want reason Policy naming field %s", tc.args, err, tc.field)
		case tc.field != "" && (!strings.Contains(err.Error(), "cni-args") || strings.Contains(err.Error(), secret)):
			t.Errorf("team-a cni-args %v: %v; want the message to name cni-args and never the value", tc.args, err)
		case tc.field != "" && ask("kube-system", tc.args) != nil:
			t.Errorf("kube-system cni-args %v: %v; want a trusted NAD served", tc.args, ask("kube-system", tc.args))
		}
	}
	// Capabilities gate every namespace: tuning and dummy declare no mac
	// and no portMappings.
	for _, key := range []string{"mac", "MAC", "portMappings", "portmappings"} {
		for _, ns := range []string{"team-a", "kube-system"} {
			err := ask(ns, map[string]any{key: "x"})
			var ae *agentapi.Error
			if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonPolicy || !strings.Contains(ae.Msg, `cni-args "`+key+`"`) {
				t.Errorf("%s cni-args %q on a network without the capability: %v; want reason Policy naming it", ns, key, err)
			}
		}
	}
	// cniArgs that are not an object: a bad request, not a panic.
	resp, err := s.client.Do(context.Background(), agentapi.Request{Op: agentapi.OpNetAttachDef, Namespace: "team-a", Name: "args", CNIArgs: []byte(`[1]`)})
	if err == nil || resp != nil && resp.NetAttachDef != nil {
		t.Errorf("cniArgs [1]: %v %+v; want a refusal", err, resp)
	}
}
