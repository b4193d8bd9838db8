package ptp_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestGC: GC keeps the attachments in the valid list and removes the
// others' host veth, masquerade entries, record and address.
func TestGC(t *testing.T) {
	n := newNode(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4, `,"ipMasq":true`)
	n.Must(ptp.Role, "ADD", keep, c)
	n.Must(ptp.Role, "ADD", drop, c)
	n.Must(ptp.Role, "GC", keep, roletest.WithKeep(t, c, keep))
	host := roletest.Open(t, "")
	if _, err := host.LinkByName(attach.HostVethName(keep.ID, "eth0")); err != nil {
		t.Errorf("GC removed the kept pod's veth: %v", err)
	}
	if _, err := host.LinkByName(attach.HostVethName(drop.ID, "eth0")); err == nil {
		t.Error("GC left the dropped pod's veth")
	}
	if eps := n.Endpoints("ptpnet"); len(eps) != 1 || eps[0].ContainerID != keep.ID {
		t.Errorf("records after GC: %+v", eps)
	}
	if rs := n.Reservations("ptpnet"); len(rs) != 1 || rs[0].ContainerID != keep.ID {
		t.Errorf("reservations after GC: %+v", rs)
	}
	if es, _ := host.NFT().MasqEntries(); len(es) != 1 {
		t.Errorf("masquerade entries after GC: %v, want the kept pod's", es)
	}
	n.Must(ptp.Role, "STATUS", keep, c)
	n.Must(ptp.Role, "DEL", keep, c)
	n.Empty("ptpnet")
}

// TestCheckFails: CHECK notices the node's route to the pod gone.
func TestCheckFails(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("chk")
	c := conf("1.0.0", v4, "")
	out := n.Must(ptp.Role, "ADD", p, c)
	host := roletest.Open(t, "")
	hostName := attach.HostVethName(p.ID, "eth0")
	rs, err := host.Routes(hostName)
	if err != nil || len(rs) == 0 {
		t.Fatalf("routes of %s: %v %v", hostName, rs, err)
	}
	for _, r := range rs {
		if err := host.DeleteRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Call(ptp.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil {
		t.Error("CHECK passed without the node's route to the pod")
	}
	n.Must(ptp.Role, "DEL", p, c)
}

// TestConcurrentPods: pods added at the same time get distinct addresses,
// each host end holds the shared gateway, the node reaches every pod, and
// pods reach each other through the node.
func TestConcurrentPods(t *testing.T) {
	n := newNode(t)
	c := conf("1.1.0", v4, `,"ipMasq":true`)
	pods := make([]roletest.Pod, 6)
	for i := range pods {
		pods[i] = n.NewPod("conc")
	}
	outs := make([][]byte, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = n.Call(ptp.Role, "ADD", p, c)
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		ip := attach.PrefixOf(roletest.Result(t, outs[i], "1.1.0").IPs[0].Address).Addr()
		if seen[ip] {
			t.Errorf("address %s given twice", ip)
		}
		seen[ip] = true
	}
	ips := make([]netip.Addr, 0, len(seen))
	for ip := range seen {
		ips = append(ips, ip)
	}
	if err := nstest.Reachable(t, pods[0].Netns, pods[1].Netns, attach.PrefixOf(roletest.Result(t, outs[1], "1.1.0").IPs[0].Address).Addr()); err != nil {
		t.Errorf("pod 0 cannot reach pod 1: %v", err)
	}
	host := roletest.Open(t, "")
	for _, ip := range ips {
		if _, err := host.Ping(ip, 3*time.Second); err != nil {
			t.Errorf("the node cannot reach %s: %v", ip, err)
		}
	}
	for _, p := range pods {
		n.Must(ptp.Role, "DEL", p, c)
	}
	if es, _ := host.NFT().MasqEntries(); len(es) > 0 {
		t.Errorf("masquerade entries after DEL: %v", es)
	}
	n.Empty("ptpnet")
}
