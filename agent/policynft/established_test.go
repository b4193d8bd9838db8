package policynft_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// echoConn is an open TCP connection from one lab pod to an echo server on
// another's port 82 that keeps its connections.
type echoConn struct {
	t *testing.T
	c net.Conn
}

// dialEcho opens an echoConn from from to to's IPv4 address.
func dialEcho(t *testing.T, from, to *labPod) *echoConn {
	t.Helper()
	return dialEchoAt(t, from, to, to.ip)
}

// dialEchoAt is dialEcho to addr, one of to's addresses.
func dialEchoAt(t *testing.T, from, to *labPod, addr netip.Addr) *echoConn {
	t.Helper()
	ap := netip.AddrPortFrom(addr, 82)
	nstest.ServeEcho(t, to.path, ap, false)
	e := &echoConn{t: t}
	must(t, nstest.Run(t, from.path, func() error {
		var err error
		e.c, err = net.DialTimeout("tcp", ap.String(), 5*time.Second)
		return err
	}))
	t.Cleanup(func() { e.c.Close() })
	return e
}

// echo sends msg and reports whether it came back within wait.
func (e *echoConn) echo(msg string, wait time.Duration) bool {
	e.c.SetDeadline(time.Now().Add(wait))
	if _, err := e.c.Write([]byte(msg)); err != nil {
		return false
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(e.c, buf)
	return err == nil && string(buf) == msg
}

// resent reports whether msg, written earlier while denied, comes back once
// TCP resends it.
func (e *echoConn) resent(msg string) bool {
	e.c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(e.c, buf)
	if err != nil || string(buf) != msg {
		e.t.Logf("resent data: %q, %v", buf, err)
		return false
	}
	return true
}

// TestPolicyEstablished: a policy change applies to established
// connections at their next packet (docs/policy.md): an open TCP
// connection that a new policy denies carries nothing more, and carries
// again (TCP's resend gets through) once the policy is gone.
func TestPolicyEstablished(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	n := newNode(t, l)
	n.start()
	c := dialEcho(t, l.pod("y/a"), l.pod("x/a"))
	if !c.echo("one", 5*time.Second) {
		t.Fatal("no echo before any policy")
	}
	deny := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetNetworkPolicy(deny) })
	if c.echo("two", denyWait) {
		t.Error("the established connection still carries data after a deny")
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.DeleteNetworkPolicy("x", "deny") })
	if !c.resent("two") {
		t.Error("after the deny is gone, the resent data is not echoed")
	}
}

// TestPolicyVerdictCache: an allowed connection's packets after its first
// are accepted by the verdict cache (the allowing rule's counter counts the
// packet that was judged, not the rest), still after another pod's ADD
// emptied the cache's first set, and a change of set elements only (the
// client's labels) still cuts it at its next packet and opens it again.
func TestPolicyVerdictCache(t *testing.T) {
	t.Parallel()
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(t, l)
	client := map[string]string{"app": "client"}
	n.e.SetPod(ya.apiPod(client))
	allow := np("x", "from-clients", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("app", "client")}},
			Ports: []networkingv1.NetworkPolicyPort{port(tcp, 82)},
		}}})
	n.e.SetNetworkPolicy(allow)
	n.start()
	c := dialEcho(t, ya, xa)
	const echoes = 20
	for i := range echoes {
		if !c.echo(fmt.Sprint(i), 5*time.Second) {
			t.Fatalf("echo %d: the allowed connection does not carry data", i)
		}
	}
	h, err := nft.Open(l.nodePath)
	must(t, err)
	defer h.Close()
	ruleCount := func() uint64 {
		cs, err := h.PolicyCounters()
		must(t, err)
		var sum uint64
		for name, c := range cs {
			if !strings.HasPrefix(name, "c-iso-") && name != "c-pending" {
				sum += c.Packets
			}
		}
		return sum
	}
	// The SYN was judged (and allowed) at ingress; the SYN-ACK, the ACK and
	// 20 round trips after it hit the cache.
	if got := ruleCount(); got != 1 {
		t.Errorf("the allowing rule counted %d packets over %d round trips, want 1 (the SYN; the cache accepts the rest)", got, echoes)
	}
	// Another pod's ADD marks its address pending and empties gen-f
	// (netops/nft genFlushMsg): until the agent's next generation the
	// connection's packets pay the pending check and are accepted by gen
	// after it, not walked (the rule counts none of them) nor dropped.
	other := netip.MustParseAddr("10.99.0.250")
	if marked, err := h.MarkPolicyPending("x", []netip.Addr{other}); err != nil || !marked {
		t.Fatalf("MarkPolicyPending(x, %s) = %v, %v; want marked", other, marked, err)
	}
	for i := range echoes {
		if !c.echo(fmt.Sprint("p", i), 5*time.Second) {
			t.Fatalf("echo %d after another pod's ADD: the allowed connection does not carry data", i)
		}
	}
	if got := ruleCount(); got != 1 {
		t.Errorf("after another pod's ADD the allowing rule counted %d packets, want 1: the cache's gen after the pending check accepts the rest", got)
	}
	must(t, h.UnmarkPolicyPending([]netip.Addr{other}))
	n.do(func(e *policy.Engine) policymodel.Delta {
		return e.SetPod(ya.apiPod(map[string]string{"app": "other"}))
	})
	if c.echo("cut", denyWait) {
		t.Error("the established connection still carries data after its client lost the label the policy allows")
	}
	n.do(func(e *policy.Engine) policymodel.Delta { return e.SetPod(ya.apiPod(client)) })
	if !c.resent("cut") {
		t.Error("after the label is back, the resent data is not echoed")
	}
	if got := ruleCount(); got < 2 {
		t.Errorf("the allowing rule counted %d packets, want the SYN and the first packet after the label came back", got)
	}
}
