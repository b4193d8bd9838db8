package portmap

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// fuzzNode stands for the node's addresses in FuzzParseConf (OwnAddr on a
// node with these): its own 192.0.2.10 and 2001:db8::10, 127.0.0.1 and ::1;
// the rest of the loopback range; a Service address on kube-ipvs0;
// everything else is another machine's.
func fuzzNode(a netip.Addr) (netops.NodeAddr, error) {
	n := netops.NodeAddr{Addr: a}
	switch {
	case a == netip.MustParseAddr("192.0.2.10") || a == netip.MustParseAddr("2001:db8::10") || a == netip.MustParseAddr("127.0.0.1") || a == netip.IPv6Loopback():
	case a.IsLoopback():
		n.NotOwn = netops.LoopbackRange
	case a == netip.MustParseAddr("10.96.0.1"):
		n.NotOwn, n.Link, n.Kind = netops.ServiceDevice, "kube-ipvs0", "dummy"
	default:
		n.NotOwn = netops.NotLocal
	}
	return n, nil
}

// FuzzParseConf feeds portmap's config and runtimeConfig.portMappings any
// stdin. Nothing panics; ADD's parse either fails with code 2, 6 or 7 or
// accepts only entries in range with a known protocol and a hostIP that is
// no address or a plain IP; the host ports then map to the pod without two
// container ports for one key, and the hostIP check lets through only
// the node's own addresses (or every address) and allowedHostIPs the node
// takes as local, refusing the rest with code 7 naming the entry. DEL's
// lenient parse fails only on undecodable input.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"portmap","snat":true,"runtimeConfig":{"portMappings":[{"hostPort":53,"containerPort":5353,"protocol":"udp","hostIP":"198.51.100.53"}]}}`,
		`{"runtimeConfig":{"portMappings":[{"hostPort":443,"containerPort":8443,"hostIP":"10.96.0.1"}]}}`,
		`{"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"hostIP":"192.0.2.10"},{"hostPort":8080,"containerPort":80,"protocol":"SCTP","hostIP":"::"}]}}`,
		`{"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"hostIP":"127.0.0.1"},{"hostPort":80,"containerPort":81,"hostIP":"::ffff:127.0.0.1"}]}}`,
		`{"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":80,"hostIP":"fe80::1%eth0"},{"hostPort":0,"containerPort":65536}]}}`,
		`{"markMasqBit":31,"backend":"iptables","conditionsV4":[],"masqAll":true,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":1,"protocol":"Tcp","hostIP":"0.0.0.0"}]}}`,
		`{"externalSetMarkChain":"KUBE-MARK-MASQ","conditionsV6":["-d","::1"],"backend":"ebpf"}`,
		`{"runtimeConfig":{"portMappings":[{"HostPort":8080,"containerport":80,"hostip":"2001:db8::10","hostIP":"2001:db8::11"}]}}`,
		`{"allowedHostIPs":["10.96.0.0/12","127.0.0.53"],"runtimeConfig":{"portMappings":[{"hostPort":443,"containerPort":8443,"hostIP":"10.96.0.1"},{"hostPort":53,"containerPort":53,"hostIP":"127.0.0.53"}]}}`,
		`{"allowedHostIPs":["10.96.0.1/33","fe80::1%eth0","::ffff:10.0.0.0/104"]}`,
	} {
		f.Add([]byte(s))
	}
	pod := []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24"), netip.MustParsePrefix("fd00::5/64")}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		a := &cniplug.Args{StdinData: stdin}
		if c, err := parseLenient(a); err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrDecodingFailure {
				t.Fatalf("DEL's parse: code %d: %v", code, err)
			}
		} else if len(c.entries) > len(c.RuntimeConfig.PortMappings) {
			t.Fatalf("DEL's parse made %d entries of %d", len(c.entries), len(c.RuntimeConfig.PortMappings))
		}

		c, err := parseStrict(a)
		if err != nil {
			switch code := cniplug.CodeOf(err); code {
			case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			default:
				t.Fatalf("code %d: %v", code, err)
			}
			return
		}
		if b := c.MarkMasqBit; (b != nil && (*b < 0 || *b > 31)) || c.ExternalSetMarkChain != nil ||
			(c.ConditionsV4 != nil && len(*c.ConditionsV4) > 0) || (c.ConditionsV6 != nil && len(*c.ConditionsV6) > 0) ||
			(c.Backend != "" && c.Backend != "nftables" && c.Backend != "iptables") {
			t.Fatalf("accepted fields %+v", c)
		}
		if len(c.allowed) != len(c.AllowedHostIPs) {
			t.Fatalf("accepted allowedHostIPs %q as %v", c.AllowedHostIPs, c.allowed)
		}
		if len(c.entries) != len(c.RuntimeConfig.PortMappings) {
			t.Fatalf("accepted %d entries of %d", len(c.entries), len(c.RuntimeConfig.PortMappings))
		}
		for i, e := range c.entries {
			m := c.RuntimeConfig.PortMappings[i]
			if m.HostPort < 1 || m.HostPort > 65535 || m.ContainerPort < 1 || m.ContainerPort > 65535 ||
				int(e.hostPort) != m.HostPort || int(e.podPort) != m.ContainerPort {
				t.Fatalf("accepted entry %d %+v as %+v", i, m, e)
			}
			if p := strings.ToLower(m.Protocol); p != "" && p != "tcp" && p != "udp" && p != "sctp" {
				t.Fatalf("accepted protocol %q", m.Protocol)
			}
			if m.HostIP == "" {
				if e.hostIP.IsValid() {
					t.Fatalf("no hostIP became %s", e.hostIP)
				}
			} else if ip, err := netip.ParseAddr(m.HostIP); err != nil || ip.Zone() != "" || ip.Unmap() != e.hostIP {
				t.Fatalf("accepted hostIP %q as %s", m.HostIP, e.hostIP)
			}
		}

		pm, err := c.portMaps("n c eth0", pod)
		if err != nil {
			if code := cniplug.CodeOf(err); code != types.ErrInvalidNetworkConfig {
				t.Fatalf("portMaps: code %d: %v", code, err)
			}
			return
		}
		seen := map[nft.PortMapping]bool{}
		for _, m := range pm.Mappings {
			if m.HostIP.IsValid() && (m.HostIP.IsUnspecified() || m.HostIP.Is4() != m.PodIP.Is4()) {
				t.Fatalf("mapping %s: host IP of the wrong family or unspecified", m)
			}
			k := m
			k.PodPort = 0
			if seen[k] {
				t.Fatalf("two mappings of the key of %s", m)
			}
			seen[k] = true
		}

		err = c.checkHostIPs(fuzzNode)
		var foreign []string
		for _, e := range c.entries {
			if !e.hostIP.IsValid() || e.hostIP.IsUnspecified() {
				continue
			}
			n, _ := fuzzNode(e.hostIP)
			allowed := false
			for _, p := range c.allowed {
				allowed = allowed || p.Contains(e.hostIP)
			}
			if n.NotOwn == netops.NotLocal || (!n.Own() && !allowed) {
				foreign = append(foreign, e.hostIP.String())
			}
		}
		switch {
		case err == nil && len(foreign) > 0:
			t.Fatalf("accepted hostIPs %v that are neither the node's own nor allowed", foreign)
		case err != nil && len(foreign) == 0:
			t.Fatalf("refused the node's own hostIPs: %v", err)
		case err != nil && (cniplug.CodeOf(err) != types.ErrInvalidNetworkConfig ||
			!strings.Contains(err.Error(), "runtimeConfig.portMappings[") || !strings.Contains(err.Error(), foreign[0])):
			t.Fatalf("refusal without code 7, the field or the value %s: %v", foreign[0], err)
		}
	})
}
