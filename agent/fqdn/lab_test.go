package fqdn

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestMain runs the tests in a network namespace of their own, which
// stands for the node: the proxy opens its sockets to the servers from
// any of the process's threads, as the agent does on a node.
func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// The lab: the node (the test's own namespace, TestMain) with the proxy,
// the DNS table and its policy routing, br_netfilter on (as the agent
// has it), two pods on its bridge br0 (their default route via the
// node), and a server namespace behind the node's vsrv with a real
// dnsmasq (on .2, and on .4, which Permit refuses), a server that lies
// (.3, Go) and, on the node, a kube-proxy-like DNAT of the "ClusterIPs"
// 10.96.0.10 and fd00:96::a to dnsmasq, 10.96.0.11 to .4.
var (
	nodePod4, nodePod6 = netip.MustParseAddr("10.53.1.1"), netip.MustParseAddr("fd00:53:1::1")
	nodeSrv4, nodeSrv6 = netip.MustParseAddr("10.53.2.1"), netip.MustParseAddr("fd00:53:2::1")
	dnsmasq4           = netip.AddrPortFrom(netip.MustParseAddr("10.53.2.2"), 53)
	dnsmasq6           = netip.AddrPortFrom(netip.MustParseAddr("fd00:53:2::2"), 53)
	liar4              = netip.AddrPortFrom(netip.MustParseAddr("10.53.2.3"), 53)
	liar6              = netip.AddrPortFrom(netip.MustParseAddr("fd00:53:2::3"), 53)
	refused4           = netip.AddrPortFrom(netip.MustParseAddr("10.53.2.4"), 53)
	refused6           = netip.AddrPortFrom(netip.MustParseAddr("fd00:53:2::4"), 53)
	clusterIP          = netip.AddrPortFrom(netip.MustParseAddr("10.96.0.10"), 53)
	clusterIP6         = netip.AddrPortFrom(netip.MustParseAddr("fd00:96::a"), 53)
	clusterRefused     = netip.AddrPortFrom(netip.MustParseAddr("10.96.0.11"), 53)
	proxyPort          = uint16(1053)
)

// kubeProxy is the kube-proxy stand-in: each ClusterIP DNATed to its
// endpoint at priority -100, for pods (prerouting) and the node (output).
var kubeProxy = map[netip.AddrPort]netip.AddrPort{clusterIP: dnsmasq4, clusterIP6: dnsmasq6, clusterRefused: refused4}

// labConfig is the proxy's Config in the lab: small bounds, to be reached.
var labConfig = Config{MaxPerPod: 4, Timeout: time.Second, IdleTimeout: 3 * time.Second, MaxUDPAnswer: 4096, MaxAddrs: 256}

// dnsmasqConf serves a CNAME chain to two A records and an AAAA, a name
// with TTL 0 (the floor), one with a day (the cap), and one Learn fails.
// user= and group= (empty): dnsmasq keeps the test's user instead of
// switching to nobody, whom make test-kernel's VM has no entry for.
const dnsmasqConf = `no-resolv
no-hosts
user=
group=
port=53
listen-address=10.53.2.2,fd00:53:2::2,10.53.2.4,fd00:53:2::4
bind-interfaces
pid-file=
log-queries
log-facility=-
host-record=e1.cdn.test,192.0.2.21,2001:db8::21,45
host-record=e1.cdn.test,192.0.2.22,60
cname=www.example.test,edge.cdn.test,300
cname=edge.cdn.test,e1.cdn.test,100
host-record=web.example.test,192.0.2.10,2001:db8::10,120
host-record=short.example.test,192.0.2.30,0
host-record=long.example.test,192.0.2.40,86400
host-record=fail.example.test,192.0.2.60,60
host-record=refused.example.test,192.0.2.70,60
`

type pod struct {
	path     string
	ip4, ip6 netip.Addr
}

type learned struct {
	pod   netip.Addr
	names []string
	addrs []LearnedAddr
	done  time.Time
}

type permitCall struct {
	pod    netip.Addr
	server netip.AddrPort
	proto  policymodel.Protocol
}

type lab struct {
	node    *netops.Handle
	pods    []pod
	srvPath string
	proxy   *Proxy
	dnsLog  *syncBuf
	liarN   atomic.Int64 // queries the liar's black hole got

	mu      sync.Mutex
	learned []learned
	permits []permitCall
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func openNS(t *testing.T, prefix string) (*netops.Handle, string) {
	t.Helper()
	path := nstest.NewNS(t, prefix)
	h, err := netops.Open(path)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	return h, path
}

func newLab(t *testing.T) *lab {
	nstest.RequireRoot(t)
	dnsmasq := nstest.RequireProgram(t, "dnsmasq", "dnsmasq-base")
	if !nstest.InPrivateNetns() {
		t.Fatal("the lab needs TestMain's private namespace: it stands for the node")
	}
	l := &lab{dnsLog: &syncBuf{}}
	node, err := netops.Open("")
	must(t, err)
	t.Cleanup(func() { node.Close() })
	l.node = node
	// The agent turns br_netfilter on (kube-proxy needs it too): the DNS
	// table has to work with it.
	must(t, node.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
		netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"}))
	br, err := l.node.EnsureBridge(netops.BridgeOpts{Name: "br0"})
	must(t, err)
	must(t, l.node.EnsureAddr("br0", netip.PrefixFrom(nodePod4, 24), netops.AddrOpts{}))
	must(t, l.node.EnsureAddr("br0", netip.PrefixFrom(nodePod6, 64), netops.AddrOpts{NoDAD: true}))
	for i := range 2 {
		h, path := openNS(t, "fp")
		_, _, err := l.node.EnsureVeth(netops.VethOpts{HostName: fmt.Sprintf("veth%d", i), PeerName: "eth0", Peer: h, MasterIndex: br.Index})
		must(t, err)
		p := pod{path: path, ip4: netip.AddrFrom4([4]byte{10, 53, 1, byte(i + 2)}), ip6: netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x53, 0, 1, 15: byte(i + 2)})}
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip4, 24), netops.AddrOpts{}))
		must(t, h.EnsureAddr("eth0", netip.PrefixFrom(p.ip6, 64), netops.AddrOpts{NoDAD: true}))
		must(t, h.EnsureRoute(netops.Route{GW: nodePod4, Dev: "eth0"}))
		must(t, h.EnsureRoute(netops.Route{GW: nodePod6, Dev: "eth0"}))
		l.pods = append(l.pods, p)
	}
	srv, srvPath := openNS(t, "fs")
	l.srvPath = srvPath
	_, _, err = l.node.EnsureVeth(netops.VethOpts{HostName: "vsrv", PeerName: "eth0", Peer: srv})
	must(t, err)
	must(t, l.node.EnsureAddr("vsrv", netip.PrefixFrom(nodeSrv4, 24), netops.AddrOpts{}))
	must(t, l.node.EnsureAddr("vsrv", netip.PrefixFrom(nodeSrv6, 64), netops.AddrOpts{NoDAD: true}))
	for _, a := range []netip.AddrPort{dnsmasq4, liar4, refused4} {
		must(t, srv.EnsureAddr("eth0", netip.PrefixFrom(a.Addr(), 24), netops.AddrOpts{}))
	}
	for _, a := range []netip.AddrPort{dnsmasq6, liar6, refused6} {
		must(t, srv.EnsureAddr("eth0", netip.PrefixFrom(a.Addr(), 64), netops.AddrOpts{NoDAD: true}))
	}

	// dnsmasq, logging every query it gets.
	conf := filepath.Join(t.TempDir(), "dnsmasq.conf")
	must(t, os.WriteFile(conf, []byte(dnsmasqConf), 0o644))
	cmd := exec.Command("nsenter", "--net="+srvPath, dnsmasq, "--keep-in-foreground", "--conf-file="+conf)
	cmd.Stdout, cmd.Stderr = l.dnsLog, l.dnsLog
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	l.serveLiar(t)

	// The kube-proxy stand-in.
	rules := "table inet kp {\n"
	for _, hook := range []string{"prerouting", "output"} {
		rules += fmt.Sprintf("chain %s { type nat hook %s priority -100;\n", hook, hook)
		for cluster, endpoint := range kubeProxy {
			ip := "ip"
			if cluster.Addr().Is6() {
				ip = "ip6"
			}
			rules += fmt.Sprintf("%s daddr %s meta l4proto { tcp, udp } th dport 53 dnat %s to %s\n", ip, cluster.Addr(), ip, endpoint)
		}
		rules += "}\n"
	}
	rules += "}\n"
	// A node has a default route; a "ClusterIP" needs one here.
	for cluster, endpoint := range kubeProxy {
		must(t, l.node.EnsureRoute(netops.Route{Dst: netip.PrefixFrom(cluster.Addr(), cluster.Addr().BitLen()), GW: endpoint.Addr(), Dev: "vsrv"}))
	}
	l.nft(t, rules)

	// The DNS table, its routing and the proxy.
	must(t, l.node.EnsureMarkLocal(netops.DNSMarkLocal))
	if _, err := l.node.NFT().EnsureDNSRedirect(nft.DNSRedirect{Port4: proxyPort, Port6: proxyPort}); err != nil {
		t.Fatal(err)
	}
	for _, p := range l.pods {
		must(t, l.node.NFT().EnsureDNSPods([]netip.Addr{p.ip4, p.ip6}))
	}
	// every server of the lab's is one the proxy handles
	must(t, l.node.NFT().SetDNSResolvers([]netip.Addr{dnsmasq4.Addr(), dnsmasq6.Addr(), liar4.Addr(), liar6.Addr(), refused4.Addr(), refused6.Addr()}))
	cfg := labConfig
	cfg.Port4, cfg.Port6 = proxyPort, proxyPort
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg.Permit = func(pod netip.Addr, server netip.AddrPort, proto policymodel.Protocol) bool {
		l.mu.Lock()
		l.permits = append(l.permits, permitCall{pod, server, proto})
		l.mu.Unlock()
		return server != refused4 && server != refused6
	}
	cfg.Learn = func(pod netip.Addr, names []string, addrs []LearnedAddr) error {
		if names[0] == "www.example.test" {
			time.Sleep(100 * time.Millisecond) // the pod waits for this
		}
		l.mu.Lock()
		l.learned = append(l.learned, learned{pod, names, addrs, time.Now()})
		l.mu.Unlock()
		if names[0] == "fail.example.test" {
			return fmt.Errorf("no room for %s", names[0])
		}
		return nil
	}
	l.proxy, err = Listen(cfg)
	must(t, err)
	t.Cleanup(func() { l.proxy.Close() })
	l.waitDNSMasq(t)
	return l
}

// nft runs nft -f with rules in the node's namespace.
func (l *lab) nft(t *testing.T, rules string) {
	t.Helper()
	cmd := exec.Command(nstest.RequireProgram(t, "nft", "nftables"), "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s\n%s", err, out, rules)
	}
}

// waitDNSMasq waits until dnsmasq answers on its address.
func (l *lab) waitDNSMasq(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := l.query(t, l.srvPath, "udp", dnsmasq4, "web.example.test.", dnsmessage.TypeA)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq does not answer: %v\n%s", err, l.dnsLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query sends one query from the namespace at from to server (UDP or
// TCP) and returns the answer, which must come from server (over UDP a
// socket that is not connected reads any source: the answer's is
// checked).
func (l *lab) query(t *testing.T, from, network string, server netip.AddrPort, name string, typ dnsmessage.Type) (*dnsmessage.Message, error) {
	return l.queryWithin(t, 3*time.Second, from, network, server, name, typ)
}

func (l *lab) queryWithin(t *testing.T, timeout time.Duration, from, network string, server netip.AddrPort, name string, typ dnsmessage.Type) (*dnsmessage.Message, error) {
	msg, q := newQuery(t, uint16(time.Now().UnixNano()), name, typ)
	var out []byte
	err := nstest.Run(t, from, func() error {
		if network == "udp" {
			pc, err := net.ListenUDP("udp", nil)
			if err != nil {
				return err
			}
			defer pc.Close()
			pc.SetDeadline(time.Now().Add(timeout))
			if _, err := pc.WriteToUDPAddrPort(msg, server); err != nil {
				return err
			}
			b := make([]byte, 65535)
			n, src, err := pc.ReadFromUDPAddrPort(b)
			if err != nil {
				return err
			}
			if src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port()); src != server {
				return fmt.Errorf("answer from %v, asked %v", src, server)
			}
			out = b[:n]
			return nil
		}
		c, err := net.DialTimeout(network, server.String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if err := writeMsg(c, msg); err != nil {
			return err
		}
		out, err = readMsg(c, 65535)
		return err
	})
	if err != nil {
		return nil, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(out); err != nil {
		return nil, err
	}
	if m.ID != q.id {
		return nil, fmt.Errorf("answer ID %d, want %d", m.ID, q.id)
	}
	return &m, nil
}

// resolver is Go's resolver in pod p, asking server over network.
func (l *lab) resolver(t *testing.T, p pod, network string, server netip.AddrPort) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var c net.Conn
		err := nstest.Run(t, p.path, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, server.String())
			return err
		})
		return c, err
	}}
}

// learnedFor returns what Learn was told for queries of name.
func (l *lab) learnedFor(name string) []learned {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []learned
	for _, x := range l.learned {
		if x.names[0] == name {
			out = append(out, x)
		}
	}
	return out
}

func (l *lab) permitted(pod netip.Addr) []permitCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []permitCall
	for _, p := range l.permits {
		if p.pod == pod {
			out = append(out, p)
		}
	}
	return out
}

func (l *lab) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.learned, l.permits = nil, nil
}

func TestProxyResolves(t *testing.T) {
	l := newLab(t)
	p := l.pods[0]
	for _, tt := range []struct {
		network  string
		server   netip.AddrPort // what the pod asks
		endpoint netip.AddrPort // what Permit sees
		proto    policymodel.Protocol
	}{
		{"udp", dnsmasq4, dnsmasq4, policymodel.UDP},
		{"tcp", dnsmasq4, dnsmasq4, policymodel.TCP},
		{"udp", dnsmasq6, dnsmasq6, policymodel.UDP},
		{"tcp", dnsmasq6, dnsmasq6, policymodel.TCP},
		{"udp", clusterIP, dnsmasq4, policymodel.UDP},
		{"tcp", clusterIP, dnsmasq4, policymodel.TCP},
		{"udp", clusterIP6, dnsmasq6, policymodel.UDP},
		{"tcp", clusterIP6, dnsmasq6, policymodel.TCP},
	} {
		t.Run(tt.network+" "+tt.server.String(), func(t *testing.T) {
			l.reset()
			// The answer comes from the server asked, the ClusterIP
			// un-NATed.
			if m, err := l.query(t, p.path, tt.network, tt.server, "web.example.test.", dnsmessage.TypeA); err != nil || len(m.Answers) != 1 {
				t.Fatalf("query: %+v, %v\ndnsmasq: %s", m, err, l.dnsLog)
			}
			start := time.Now()
			ips, err := l.resolver(t, p, tt.network, tt.server).LookupNetIP(context.Background(), "ip", "www.example.test.")
			got := time.Now()
			if err != nil {
				t.Fatalf("resolve: %v\ndnsmasq: %s", err, l.dnsLog)
			}
			slices.SortFunc(ips, netip.Addr.Compare)
			want := []netip.Addr{netip.MustParseAddr("192.0.2.21"), netip.MustParseAddr("192.0.2.22"), netip.MustParseAddr("2001:db8::21")}
			if !slices.Equal(ips, want) {
				t.Errorf("resolved %v, want %v", ips, want)
			}
			ls := l.learnedFor("www.example.test")
			var all []LearnedAddr
			for _, x := range ls {
				if x.pod != p.ip4 && x.pod != p.ip6 {
					t.Errorf("learned for pod %v, want %v or %v", x.pod, p.ip4, p.ip6)
				}
				if want := []string{"www.example.test", "edge.cdn.test", "e1.cdn.test"}; !slices.Equal(x.names, want) {
					t.Errorf("learned names %q, want %q", x.names, want)
				}
				if !x.done.Before(got) || x.done.Before(start) {
					t.Errorf("Learn returned at %v, the pod had its answer at %v: not before", x.done.Sub(start), got.Sub(start))
				}
				all = append(all, x.addrs...)
			}
			slices.SortFunc(all, func(a, b LearnedAddr) int { return a.Addr.Compare(b.Addr) })
			// The least TTL on the way: CNAMEs 300 and 100, A 45 and 60.
			if want := addrs("192.0.2.21", 45, "192.0.2.22", 60, "2001:db8::21", 45); !slices.Equal(all, want) {
				t.Errorf("learned %v, want %v", all, want)
			}
			calls := append(l.permitted(p.ip4), l.permitted(p.ip6)...)
			if len(calls) == 0 {
				t.Errorf("Permit never asked")
			}
			for _, c := range calls {
				if c.server != tt.endpoint || c.proto != tt.proto {
					t.Errorf("Permit asked for %v %v, want the endpoint %v %v", c.server, c.proto, tt.endpoint, tt.proto)
				}
			}
		})
	}
}

func TestProxyBounds(t *testing.T) {
	l := newLab(t)
	p := l.pods[0]

	t.Run("TTL floor and cap", func(t *testing.T) {
		for _, tt := range []struct {
			name       string
			learned    time.Duration
			answered   uint32
			server     netip.AddrPort
			network    string
			wantServer bool
		}{
			{"short.example.test", 5 * time.Second, 0, dnsmasq4, "udp", true},
			{"long.example.test", time.Hour, 3600, dnsmasq6, "tcp", true},
		} {
			m, err := l.query(t, p.path, tt.network, tt.server, tt.name+".", dnsmessage.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Answers) != 1 || m.Answers[0].Header.TTL != tt.answered {
				t.Errorf("%s: answer %+v, want one record with TTL %d", tt.name, m.Answers, tt.answered)
			}
			ls := l.learnedFor(tt.name)
			if len(ls) != 1 || len(ls[0].addrs) != 1 || ls[0].addrs[0].TTL != tt.learned {
				t.Errorf("%s: learned %+v, want one address for %v", tt.name, ls, tt.learned)
			}
		}
	})

	t.Run("Learn fails: SERVFAIL", func(t *testing.T) {
		m, err := l.query(t, p.path, "udp", dnsmasq4, "fail.example.test.", dnsmessage.TypeA)
		if err != nil || m.RCode != dnsmessage.RCodeServerFailure || len(m.Answers) != 0 {
			t.Errorf("answer %+v, %v; want SERVFAIL without records", m, err)
		}
	})

	t.Run("refused by Permit: never at the server", func(t *testing.T) {
		l.reset()
		for _, server := range []netip.AddrPort{refused4, refused6, clusterRefused} {
			for _, network := range []string{"udp", "tcp"} {
				m, err := l.query(t, p.path, network, server, "refused.example.test.", dnsmessage.TypeA)
				if err != nil || m.RCode != dnsmessage.RCodeRefused || len(m.Answers) != 0 {
					t.Errorf("%s to %v: %+v, %v; want REFUSED", network, server, m, err)
				}
			}
		}
		// The ClusterIP's endpoint is what Permit refused.
		for _, c := range l.permitted(p.ip4) {
			if c.server != refused4 && c.server != refused6 {
				t.Errorf("Permit asked for %v, want %v or %v", c.server, refused4, refused6)
			}
		}
		if _, err := l.resolver(t, p, "udp", refused4).LookupNetIP(context.Background(), "ip4", "refused.example.test."); err == nil {
			t.Errorf("Go's resolver got an answer through a refused server")
		}
		// dnsmasq answers on those addresses: the name never reached it.
		if m, err := l.query(t, l.srvPath, "udp", refused4, "web.example.test.", dnsmessage.TypeA); err != nil || len(m.Answers) != 1 {
			t.Fatalf("dnsmasq on %v: %+v, %v", refused4, m, err)
		}
		if strings.Contains(l.dnsLog.String(), "refused.example.test") {
			t.Errorf("dnsmasq saw a refused query:\n%s", l.dnsLog)
		}
	})

	t.Run("the proxy's port asked directly: never answered", func(t *testing.T) {
		before := l.proxy.Stats()
		var wg sync.WaitGroup
		for _, to := range []netip.AddrPort{netip.AddrPortFrom(nodePod4, proxyPort), netip.AddrPortFrom(nodePod6, proxyPort)} {
			for _, network := range []string{"udp", "tcp"} {
				for _, pod := range l.pods {
					wg.Go(func() {
						if m, err := l.queryWithin(t, 500*time.Millisecond, pod.path, network, to, "web.example.test.", dnsmessage.TypeA); err == nil {
							t.Errorf("%s to the proxy's own %v: answered %+v", network, to, m)
						}
					})
				}
			}
		}
		wg.Wait()
		if after := l.proxy.Stats(); after.Queries != before.Queries {
			t.Errorf("the proxy read %d queries sent to its own port: the DNS table drops them", after.Queries-before.Queries)
		}
	})

	t.Run("several queries on one TCP connection", func(t *testing.T) {
		names := []string{"web.example.test.", "short.example.test.", "www.example.test."}
		var answers []*dnsmessage.Message
		must(t, nstest.Run(t, p.path, func() error {
			c, err := net.DialTimeout("tcp", dnsmasq4.String(), 3*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			for i, n := range names { // pipelined: all written first
				msg, _ := newQuery(t, uint16(100+i), n, dnsmessage.TypeA)
				if err := writeMsg(c, msg); err != nil {
					return err
				}
			}
			for range names {
				b, err := readMsg(c, 65535)
				if err != nil {
					return err
				}
				var m dnsmessage.Message
				if err := m.Unpack(b); err != nil {
					return err
				}
				answers = append(answers, &m)
			}
			return nil
		}))
		for i, m := range answers {
			if m.ID != uint16(100+i) || m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) == 0 {
				t.Errorf("answer %d: %+v", i, m)
			}
		}
	})

	t.Run("a flood from one pod", func(t *testing.T) {
		before := l.proxy.Stats()
		const n = 200
		must(t, nstest.Run(t, p.path, func() error {
			c, err := net.Dial("udp", liar4.String())
			if err != nil {
				return err
			}
			defer c.Close()
			for i := range n {
				msg, _ := newQuery(t, uint16(i), "blackhole.lie.test.", dnsmessage.TypeA)
				if _, err := c.Write(msg); err != nil {
					return err
				}
			}
			return nil
		}))
		// Another pod is answered meanwhile.
		ips, err := l.resolver(t, l.pods[1], "udp", dnsmasq4).LookupNetIP(context.Background(), "ip4", "web.example.test.")
		if err != nil || len(ips) != 1 {
			t.Errorf("the other pod during the flood: %v, %v", ips, err)
		}
		time.Sleep(200 * time.Millisecond)
		if got := l.liarN.Load(); got > int64(labConfig.MaxPerPod) {
			t.Errorf("the server got %d of the flood's queries, over the pod's bound %d", got, labConfig.MaxPerPod)
		}
		after := l.proxy.Stats()
		if d := after.Dropped - before.Dropped; d < n/2 {
			t.Errorf("dropped %d of %d", d, n)
		}
		t.Logf("flood of %d: the server got %d, the proxy dropped %d", n, l.liarN.Load(), after.Dropped-before.Dropped)
		waitIdle(t, l.proxy)
	})

	t.Run("a server that lies", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			network string
			rcode   dnsmessage.RCode
			tc      bool
		}{
			{"big.lie.test.", "udp", dnsmessage.RCodeSuccess, true},            // over MaxUDPAnswer: asked again over TCP
			{"big.lie.test.", "tcp", dnsmessage.RCodeServerFailure, false},     // over MaxAddrs
			{"garbage.lie.test.", "udp", dnsmessage.RCodeServerFailure, false}, // never an answer
			{"garbage.lie.test.", "tcp", dnsmessage.RCodeServerFailure, false},
			{"wrongid.lie.test.", "udp", dnsmessage.RCodeServerFailure, false},
			{"wrongid.lie.test.", "tcp", dnsmessage.RCodeServerFailure, false},
			{"badrdata.lie.test.", "udp", dnsmessage.RCodeServerFailure, false},
			{"loop.lie.test.", "tcp", dnsmessage.RCodeServerFailure, false},
			{"extra.lie.test.", "udp", dnsmessage.RCodeSuccess, false},
		} {
			for _, server := range []netip.AddrPort{liar4, liar6} {
				m, err := l.query(t, p.path, tt.network, server, tt.name, dnsmessage.TypeA)
				if err != nil {
					t.Errorf("%s over %s to %v: %v", tt.name, tt.network, server, err)
					continue
				}
				if m.RCode != tt.rcode || m.Truncated != tt.tc {
					t.Errorf("%s over %s to %v: rcode %v TC %v, want %v %v", tt.name, tt.network, server, m.RCode, m.Truncated, tt.rcode, tt.tc)
				}
			}
		}
		for _, x := range l.learnedFor("extra.lie.test") {
			if want := addrs("192.0.2.50", 60); !slices.Equal(x.addrs, want) {
				t.Errorf("learned %v of an answer with another name's record, want %v", x.addrs, want)
			}
		}
		for _, name := range []string{"big.lie.test", "loop.lie.test", "garbage.lie.test"} {
			if ls := l.learnedFor(name); len(ls) != 0 {
				t.Errorf("learned %d times (%d addresses the first) from a lie", len(ls), len(ls[0].addrs))
			}
		}
		// Still serving.
		if ips, err := l.resolver(t, p, "tcp", dnsmasq6).LookupNetIP(context.Background(), "ip6", "web.example.test."); err != nil || len(ips) != 1 {
			t.Errorf("after the lies: %v, %v", ips, err)
		}
	})

	t.Run("the kernel judges the endpoint first", func(t *testing.T) {
		// As the policy table's input chain does: a rule on the input
		// hook that drops the pod's connections whose peer (the reply's
		// source: the endpoint) is dnsmasq. A query to the ClusterIP
		// never reaches the proxy; one to the other family's server does.
		p := l.pods[1]
		l.nft(t, fmt.Sprintf("table inet judge { chain input { type filter hook input priority -1; ct original ip saddr %s ct reply ip saddr %s counter drop; }; }", p.ip4, dnsmasq4.Addr()))
		t.Cleanup(func() { l.nft(t, "delete table inet judge") })
		l.reset()
		before := l.proxy.Stats()
		for _, network := range []string{"udp", "tcp"} {
			if m, err := l.queryWithin(t, 500*time.Millisecond, p.path, network, clusterIP, "web.example.test.", dnsmessage.TypeA); err == nil {
				t.Errorf("%s to %v (endpoint %v, dropped by the kernel): answered %+v", network, clusterIP, dnsmasq4, m)
			}
		}
		if calls := l.permitted(p.ip4); len(calls) != 0 {
			t.Errorf("Permit asked %+v: the kernel dropped those queries before the proxy", calls)
		}
		if after := l.proxy.Stats(); after.Queries != before.Queries {
			t.Errorf("the proxy read %d queries the kernel dropped", after.Queries-before.Queries)
		}
		if m, err := l.query(t, p.path, "udp", clusterIP6, "web.example.test.", dnsmessage.TypeA); err != nil || len(m.Answers) != 1 {
			t.Errorf("to %v beside it: %+v, %v", clusterIP6, m, err)
		}
	})
	t.Logf("stats %+v", l.proxy.Stats())
}

// waitIdle waits until the proxy has no query under way.
func waitIdle(t *testing.T, p *Proxy) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		n := p.total
		p.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the proxy is still busy")
}

// serveLiar serves DNS on liar4 and liar6 over UDP and TCP, lying as the
// query's name says: blackhole (no answer, counted), big (320 A records:
// ~5 KiB, in 198.18.0.0/15), garbage (bytes that are no answer), wrongid, badrdata (an A
// record of 3 bytes), loop (a CNAME loop), extra (its own A record and
// another name's).
func (l *lab) serveLiar(t *testing.T) {
	answer := func(msg []byte) []byte {
		q, err := parseQuery(msg)
		if err != nil {
			return nil
		}
		switch q.name {
		case "blackhole.lie.test":
			l.liarN.Add(1)
			return nil
		case "garbage.lie.test":
			return bytes.Repeat([]byte{0xff}, 100)
		case "wrongid.lie.test":
			q.id++
			return buildAnswer(t, q, dnsmessage.Header{}, rr{owner: q.name + ".", ttl: 60, addr: "192.0.2.99"})
		case "badrdata.lie.test":
			b := buildAnswer(t, q, dnsmessage.Header{}, rr{owner: q.name + ".", ttl: 60, addr: "192.0.2.99"})
			b = b[:len(b)-11] // the OPT record
			b[len(b)-5] = 3   // rdlength 4 -> 3
			return b[:len(b)-1]
		case "loop.lie.test":
			return buildAnswer(t, q, dnsmessage.Header{}, rr{owner: q.name + ".", ttl: 60, target: "x.lie.test."}, rr{owner: "x.lie.test.", ttl: 60, target: q.name + "."})
		case "extra.lie.test":
			return buildAnswer(t, q, dnsmessage.Header{}, rr{owner: q.name + ".", ttl: 60, addr: "192.0.2.50"}, rr{owner: "victim.test.", ttl: 60, addr: "198.51.100.1"})
		case "big.lie.test":
			var recs []rr
			for i := range 320 {
				recs = append(recs, rr{owner: q.name + ".", ttl: 60, addr: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).String()})
			}
			return buildAnswer(t, q, dnsmessage.Header{}, recs...)
		}
		return nil
	}
	for _, a := range []netip.AddrPort{liar4, liar6} {
		must(t, nstest.Run(t, l.srvPath, func() error {
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go func() {
				buf := make([]byte, 65535)
				for {
					n, from, err := pc.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					if out := answer(buf[:n]); out != nil {
						pc.WriteToUDPAddrPort(out, from)
					}
				}
			}()
			ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(a))
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						for {
							msg, err := readMsg(c, 65535)
							if err != nil {
								return
							}
							if out := answer(msg); out != nil {
								if writeMsg(c, out) != nil {
									return
								}
							}
						}
					}()
				}
			}()
			return nil
		}))
	}
}
