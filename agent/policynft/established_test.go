package policynft_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibox/cnibox/agent/policy"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestPolicyEstablished: a policy change applies to established
// connections at their next packet (docs/policy.md): an open TCP
// connection that a new policy denies carries nothing more, and carries
// again (TCP's resend gets through) once the policy is gone.
func TestPolicyEstablished(t *testing.T) {
	l := newLab(t, "x/a", "y/a")
	xa, ya := l.pod("x/a"), l.pod("y/a")
	n := newNode(t, l)
	n.start()
	// An echo server on x/a:82 that keeps its connections.
	must(t, nstest.Run(t, xa.path, func() error {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:82", xa.ip))
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
				go func() { defer c.Close(); io.Copy(c, c) }()
			}
		}()
		return nil
	}))
	var c net.Conn
	must(t, nstest.Run(t, ya.path, func() error {
		var err error
		c, err = net.DialTimeout("tcp", fmt.Sprintf("%s:82", xa.ip), 5*time.Second)
		return err
	}))
	defer c.Close()
	echo := func(msg string, wait time.Duration) bool {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := c.Write([]byte(msg)); err != nil {
			return false
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return err == nil && string(buf) == msg
	}
	if !echo("one", 5*time.Second) {
		t.Fatal("no echo before any policy")
	}
	deny := np("x", "deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
	n.do(func(e *policy.Engine) policy.Delta { return e.SetNetworkPolicy(deny) })
	if echo("two", denyWait) {
		t.Error("the established connection still carries data after a deny")
	}
	n.do(func(e *policy.Engine) policy.Delta { return e.DeleteNetworkPolicy("x", "deny") })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two" {
		t.Errorf("after the deny is gone, the resent data is not echoed: %q, %v", buf, err)
	}
}
