package policynft_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// lab is a node namespace with bridge br0 (10.99.0.1/24) and br_netfilter
// on (bridged traffic meets the forward hook, as on a kubelet node), and
// pods on it, each serving TCP 80 and 81, UDP 80 (echoing) and, where the
// kernel has SCTP sockets, SCTP 80.
type lab struct {
	node     *netops.Handle
	nodePath string
	pods     []*labPod
	sctp     bool // the pods serve SCTP 80 and the probes include it
}

type labPod struct {
	ns, name string
	path     string
	ip, ip6  netip.Addr
}

var nodeAddr, nodeAddr6 = netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("fd00:99::1")

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openNS(t testing.TB, prefix string) (*netops.Handle, string) {
	t.Helper()
	path := nstest.NewNS(t, prefix)
	h, err := netops.Open(path)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	return h, path
}

// newLab makes the node and pods "ns/name" (addresses 10.99.0.2, .3, ...).
func newLab(t testing.TB, pods ...string) *lab {
	nstest.RequireRoot(t)
	l := &lab{sctp: hasSCTP(t)}
	l.node, l.nodePath = openNS(t, "pn")
	br, err := l.node.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	must(t, l.node.EnsureAddr("br0", netip.PrefixFrom(nodeAddr, 24), netops.AddrOpts{}))
	must(t, l.node.EnsureAddr("br0", netip.PrefixFrom(nodeAddr6, 64), netops.AddrOpts{NoDAD: true}))
	if err := l.node.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
		netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter: bridged traffic never meets the forward hook (%v)", err)
	}
	for i, key := range pods {
		h, path := openNS(t, "pp")
		// Dual stack as the bridge role makes it: the pod's link-local
		// address is netops.PodLinkLocal("veth<i>").
		_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("veth%d", i), PeerName: "eth0", Peer: h, MasterIndex: br.Index,
			IPv6: netops.VethIPv6LinkLocal})
		must(t, err)
		p := &labPod{path: path, ip: netip.AddrFrom4([4]byte{10, 99, 0, byte(i + 2)}),
			ip6: netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x99, 15: byte(i + 2)})}
		for j := range key {
			if key[j] == '/' {
				p.ns, p.name = key[:j], key[j+1:]
			}
		}
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip, 24), netops.AddrOpts{}))
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip6, 64), netops.AddrOpts{NoDAD: true}))
		must(t, h.EnsureRoute(netops.Route{GW: nodeAddr, Dev: "eth0"}))
		must(t, h.EnsureRoute(netops.Route{GW: nodeAddr6, Dev: "eth0"}))
		serve(t, p, l.sctp)
		l.pods = append(l.pods, p)
	}
	return l
}

// serve starts TCP 80 and 81 (greeting "hi"), UDP 80 (echo) and, if
// withSCTP, SCTP 80 (greeting "hi") in p.
func serve(t testing.TB, p *labPod, withSCTP bool) {
	must(t, nstest.Run(t, p.path, func() error {
		for _, port := range []int{80, 81} {
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go nstest.Greet(ln)
		}
		if withSCTP {
			if err := serveSCTP(t); err != nil {
				return err
			}
		}
		pc, err := net.ListenPacket("udp", ":80")
		if err != nil {
			return err
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(buf[:n], from)
			}
		}()
		return nil
	}))
}

// A probe waits for its answer as long as what it expects allows: one
// that a drop should keep away waits denyWait (a connection on one bridge
// answers in microseconds), one that should pass waits up to allowWait
// for it (in make test-kernel's VM, TCG on a loaded host, a burst of
// allowed probes took a second and more each).
const (
	denyWait  = 1500 * time.Millisecond
	allowWait = 15 * time.Second
)

// waitFor is the wait of a probe expected to pass (allowed) or not.
func waitFor(allowed bool) time.Duration {
	if allowed {
		return allowWait
	}
	return denyWait
}

// connect reports whether from reaches to on proto/port within wait (TCP
// and SCTP: the greeting arrives; UDP: the echo does).
func connect(t *testing.T, from *labPod, to netip.Addr, proto policymodel.Protocol, port uint16, wait time.Duration) bool {
	if proto == policymodel.SCTP {
		return connectSCTP(t, from, to, port, wait)
	}
	deadline := time.Now().Add(wait)
	var c net.Conn
	network := "tcp"
	if proto == policymodel.UDP {
		network = "udp"
	}
	err := nstest.Run(t, from.path, func() error {
		var err error
		c, err = net.DialTimeout(network, netip.AddrPortFrom(to, port).String(), wait)
		return err
	})
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if proto == policymodel.UDP {
		// A client resends: the first datagram may wait for a neighbour
		// entry, or meet a probe's racing conntrack entry. (Writes fail
		// once the read below has closed c.)
		go func() {
			for time.Now().Before(deadline) {
				if _, err := c.Write([]byte("hi")); err != nil {
					return
				}
				time.Sleep(denyWait / 6)
			}
		}()
	}
	buf := make([]byte, 2)
	_, err = io.ReadFull(c, buf)
	return err == nil && string(buf) == "hi"
}

// probe is one connection and whether the model allows it.
type probe struct {
	from, to *labPod
	proto    policymodel.Protocol
	port     uint16
	v6       bool
}

// addrs are the probe's source and destination addresses.
func (p probe) addrs() (src, dst netip.Addr) {
	if p.v6 {
		return p.from.ip6, p.to.ip6
	}
	return p.from.ip, p.to.ip
}

func (p probe) String() string {
	_, dst := p.addrs()
	return fmt.Sprintf("%s/%s -> %s/%s %s %s/%d", p.from.ns, p.from.name, p.to.ns, p.to.name, dst, p.proto, p.port)
}

// probes are every pair of pods on TCP 80, TCP 81, UDP 80 and (if the lab
// serves it) SCTP 80, IPv4 and IPv6.
func (l *lab) probes() []probe {
	type protoPort struct {
		proto policymodel.Protocol
		port  uint16
	}
	pps := []protoPort{{policymodel.TCP, 80}, {policymodel.TCP, 81}, {policymodel.UDP, 80}}
	if l.sctp {
		pps = append(pps, protoPort{policymodel.SCTP, 80})
	}
	var out []probe
	for _, a := range l.pods {
		for _, b := range l.pods {
			if a == b {
				continue
			}
			for _, pp := range pps {
				out = append(out, probe{a, b, pp.proto, pp.port, false}, probe{a, b, pp.proto, pp.port, true})
			}
		}
	}
	return out
}

// want is the model's decision: the source's egress and the
// destination's ingress (both pods are on this node).
func want(m *policymodel.Model, p probe) bool {
	src, dst := p.addrs()
	c := policymodel.Conn{Src: src, Dst: dst, Proto: p.proto, Port: p.port}
	return m.Evaluate(policymodel.Egress, c).Allowed && m.Evaluate(policymodel.Ingress, c).Allowed
}

// checkTraffic runs every probe at once and compares with the model,
// each probe waiting as long as what the model expects of it allows.
func (l *lab) checkTraffic(t *testing.T, m *policymodel.Model) {
	t.Helper()
	ps := l.probes()
	got := make([]bool, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			_, dst := p.addrs()
			got[i] = connect(t, p.from, dst, p.proto, p.port, waitFor(want(m, p)))
		})
	}
	wg.Wait()
	nSCTP, nSCTPConnected := 0, 0
	for i, p := range ps {
		if w := want(m, p); got[i] != w {
			t.Errorf("%s: connected %v, model says %v", p, got[i], w)
		}
		if p.proto == policymodel.SCTP {
			nSCTP++
			if got[i] {
				nSCTPConnected++
			}
		}
	}
	if l.sctp {
		t.Logf("%d of %d probes SCTP, %d of them connected", nSCTP, len(ps), nSCTPConnected)
	}
	l.checkExplain(t, m, ps)
}

// apiPod is the pod p as the API has it, labelled app=<name>, naming port
// 81/TCP "web".
func (p *labPod) apiPod(labels map[string]string) *policy.Pod {
	if labels == nil {
		labels = map[string]string{"app": p.name}
	}
	return policy.PodFromAPI(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 81}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: p.ip.String()}, {IP: p.ip6.String()}}},
	})
}

func np(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func port(proto corev1.Protocol, p any, end ...int32) networkingv1.NetworkPolicyPort {
	out := networkingv1.NetworkPolicyPort{Protocol: &proto}
	switch v := p.(type) {
	case int:
		ip := intstr.FromInt32(int32(v))
		out.Port = &ip
	case string:
		ip := intstr.FromString(v)
		out.Port = &ip
	}
	if len(end) > 0 {
		out.EndPort = &end[0]
	}
	return out
}

var errNoPod = errors.New("no such pod")

func (l *lab) pod(key string) *labPod {
	for _, p := range l.pods {
		if p.ns+"/"+p.name == key {
			return p
		}
	}
	panic(errNoPod)
}

// checkExplain: Evaluate over the table's sets as the kernel holds them
// (what `cnibox doctor --policy` shows) gives every probe the verdict and
// the rule that Model.Evaluate does over the model's sets, per direction.
func (l *lab) checkExplain(t *testing.T, m *policymodel.Model, ps []probe) {
	t.Helper()
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	sets, err := h.PolicyMembership()
	must(t, err)
	for _, p := range ps {
		src, dst := p.addrs()
		c := policymodel.Conn{Src: src, Dst: dst, Proto: p.proto, Port: p.port}
		for _, dir := range []policymodel.Direction{policymodel.Ingress, policymodel.Egress} {
			got, err := m.Rules.Evaluate(dir, c, sets)
			must(t, err)
			if w := m.Evaluate(dir, c); got != w {
				t.Errorf("%s %s: over the kernel's sets %+v, over the model's %+v", p, dir, got, w)
			}
		}
	}
}
