package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
)

// The bridge + host-local + tuning + bandwidth chain of the example
// conflist, driven through libcni.

// chainPodState is what tuning and bandwidth did, as a user would look.
type chainPodState struct {
	eth0     netops.LinkSettings
	somax    string
	hostTBF  netops.TBF
	shaped   bool
	ifbs     []string
	ifbTBF   netops.TBF
	redirect int
	ifbIndex int
}

func chainState(t *testing.T, p *pod, hostIf string) chainPodState {
	t.Helper()
	var s chainPodState
	pod, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	if s.eth0, err = pod.LinkSettings("eth0"); err != nil {
		t.Fatal(err)
	}
	if s.somax, err = pod.Sysctl("net.core.somaxconn"); err != nil {
		t.Fatal(err)
	}
	h := hostHandle(t)
	if s.hostTBF, s.shaped, err = h.RootTBF(hostIf); err != nil {
		t.Fatal(err)
	}
	if s.redirect, _, err = h.IngressRedirect(hostIf); err != nil {
		t.Fatal(err)
	}
	s.ifbs, s.ifbIndex, s.ifbTBF = nodeIfbs(t)
	return s
}

func podSysctl(t *testing.T, p *pod, key string) string {
	t.Helper()
	h, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	v, err := h.Sysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nodeIfbs returns the ifb devices on the node, and the index and tbf of
// the last one.
func nodeIfbs(t *testing.T) (names []string, idx int, tbf netops.TBF) {
	t.Helper()
	h := hostHandle(t)
	links, err := h.Links()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Kind == "ifb" {
			names = append(names, l.Name)
			idx = l.Index
			tbf, _, _ = h.RootTBF(l.Name)
		}
	}
	return names, idx, tbf
}

// hostVeth is the host end of the pod's veth in a bridge result.
func hostVeth(t *testing.T, r *current.Result) string {
	t.Helper()
	for _, ifc := range r.Interfaces {
		if strings.HasPrefix(ifc.Name, "cbx") && ifc.Sandbox == "" {
			return ifc.Name
		}
	}
	t.Fatalf("no host veth in %+v", r.Interfaces)
	return ""
}

// TestTuningBandwidthChainEveryVersion: the example conflist at every spec
// version tunes the pod and shapes its traffic; CHECK passes; DEL twice
// leaves no ifb, veth, reservation or tuned value behind.
func TestTuningBandwidthChainEveryVersion(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			l := withVersion(t, loadList(t, repoFile("examples", "90-tuning-bandwidth.conflist")), v)
			p := e.newPod("shaped")
			before := podSysctl(t, p, "net.core.somaxconn")
			res := e.add(l, p)
			hostIf := hostVeth(t, res)
			s := chainState(t, p, hostIf)
			if s.eth0.MTU != 1450 || s.eth0.TxQLen != 500 || s.somax != "1024" {
				t.Errorf("pod after ADD: mtu %d, txqueuelen %d, somaxconn %s; want 1450, 500, 1024", s.eth0.MTU, s.eth0.TxQLen, s.somax)
			}
			if !s.shaped || s.hostTBF.Rate != 100_000_000/8 {
				t.Errorf("host veth %s: tbf %v %+v, want 12500000 bytes/s", hostIf, s.shaped, s.hostTBF)
			}
			if len(s.ifbs) != 1 || s.ifbTBF.Rate != 50_000_000/8 || s.redirect != s.ifbIndex {
				t.Errorf("ifbs %v (tbf %+v), redirect to %d: want one ifb at 6250000 bytes/s that %s redirects to", s.ifbs, s.ifbTBF, s.redirect, hostIf)
			}
			if len(s.ifbs) == 1 && res.Interfaces[len(res.Interfaces)-1].Name != s.ifbs[0] {
				t.Errorf("result interfaces %+v: want the ifb %s last", res.Interfaces, s.ifbs[0])
			}
			if v != "0.3.0" && v != "0.3.1" {
				if err := e.cni.CheckNetworkList(context.Background(), l, p.rt); err != nil {
					t.Errorf("CHECK: %v", err)
				}
			}
			if v == "1.1.0" {
				if err := e.cni.GetStatusNetworkList(context.Background(), l); err != nil {
					t.Errorf("STATUS: %v", err)
				}
			}
			for range 2 {
				e.del(l, p)
			}
			ifbs, _, _ := nodeIfbs(t)
			if somax := podSysctl(t, p, "net.core.somaxconn"); somax != before || len(ifbs) != 0 {
				t.Errorf("after DEL: somaxconn %s (was %s), ifbs %v", somax, before, ifbs)
			}
			if got := ourVeths(t); len(got) != 0 {
				t.Errorf("veths left after DEL: %v", got)
			}
			if got := e.reservations(l.Name); len(got) != 0 {
				t.Errorf("reservations left after DEL: %v", got)
			}
		})
	}
}

// TestTuningBandwidthCapabilities: the runtime's mac and bandwidth
// capability arguments win over the config.
func TestTuningBandwidthCapabilities(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "90-tuning-bandwidth.conflist"))
	p := e.newPod("caps")
	p.rt.CapabilityArgs = map[string]any{
		"mac":       "c2:11:22:33:44:55",
		"bandwidth": map[string]any{"ingressRate": 8_000_000, "ingressBurst": 800_000},
	}
	res := e.add(l, p)
	hostIf := hostVeth(t, res)
	s := chainState(t, p, hostIf)
	if s.eth0.MAC.String() != "c2:11:22:33:44:55" {
		t.Errorf("eth0 MAC = %s, want the capability's c2:11:22:33:44:55", s.eth0.MAC)
	}
	if s.hostTBF.Rate != 1_000_000 || len(s.ifbs) != 0 {
		t.Errorf("host tbf %+v, ifbs %v: want the capability's 1000000 bytes/s and no egress shaping", s.hostTBF, s.ifbs)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, p.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	for range 2 {
		e.del(l, p)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
}

// TestTuningBandwidthGC: GC with one pod in the valid list removes the
// other pod's ifb and keeps the first one's.
func TestTuningBandwidthGC(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "90-tuning-bandwidth.conflist"))
	a, b := e.newPod("gca"), e.newPod("gcb")
	e.add(l, a)
	e.add(l, b)
	if names, _, _ := nodeIfbs(t); len(names) != 2 {
		t.Fatalf("ifbs after two ADDs: %v", names)
	}
	err := e.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: a.id, IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if names, _, _ := nodeIfbs(t); len(names) != 1 {
		t.Errorf("ifbs after GC: %v, want only a's", names)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, a.rt); err != nil {
		t.Errorf("CHECK of the kept pod after GC: %v", err)
	}
	for _, p := range []*pod{a, b} {
		e.del(l, p)
		e.del(l, p)
	}
	if names, _, _ := nodeIfbs(t); len(names) != 0 {
		t.Errorf("ifbs after DEL: %v", names)
	}
}
