package reliability

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// rebootConf is a bridge network on a /28: 13 addresses to hand out (the
// gateway .1 is never handed out), so ghosts of one boot fill it quickly.
func rebootConf(name string, subnet int, extra string) (tnet, []byte) {
	nw := tnet{name: name, bridge: "cbx" + name}
	return nw, []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.92.%d.0/28"}]]%s}}`, name, nw.bridge, subnet, extra))
}

// reboot plays a node reboot for the kernel: every pod namespace of the
// boot is gone (and the veths with them), and so are cnibox's nftables
// tables and the bridges. The store, on disk, stays.
func reboot(t *testing.T, netnss []string, bridges ...string) {
	t.Helper()
	for _, ns := range netnss {
		removeNS(t, ns)
	}
	for _, args := range [][]string{{"delete", "table", "inet", "cnibox"}, {"delete", "table", "bridge", "cnibox"}} {
		_ = exec.Command("nft", args...).Run()
	}
	for _, br := range bridges {
		_ = exec.Command("ip", "link", "delete", br).Run()
	}
}

func bootEnv(id string) []string { return []string{"CNIBOX_BOOT_ID=" + id} }

// TestRebootReclaim fills a pool in boot A, reboots, and checks that boot B
// can fill it again: the first ADD of boot B releases the ghosts of boot A
// (reservations and endpoint records), keeps a namespace that is still
// there, and a sticky pod gets its address back under a new container ID.
// With the reclaim turned off ($CNIBOX_REBOOT_RECLAIM=off, or
// "reclaimAfterReboot": false) the ghosts stay and the pool runs out.
func TestRebootReclaim(t *testing.T) {
	n := newNode(t, plainBin(t))
	nw, conf := rebootConf("reboot", 1, "")
	snw, sconf := rebootConf("rsticky", 2, `,"sticky":true`)
	addAs := func(conf []byte, boot, pod string, env ...string) (*attachment, result) {
		t.Helper()
		a := &attachment{cid: uniq("boot" + boot), ifname: "eth0", netns: newNS(t)}
		args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + pod
		r := n.run(call{role: "bridge", verb: "ADD", conf: conf, cid: a.cid, netns: a.netns, ifname: "eth0", args: args, env: append(bootEnv(boot), env...)})
		if r.code == 0 {
			a.prev, a.ips = r.out, resultIPs(t, r.out)
		}
		return a, r
	}
	mustAdd := func(conf []byte, boot, pod string) *attachment {
		t.Helper()
		a, r := addAs(conf, boot, pod)
		if r.code != 0 || r.killed {
			t.Fatalf("boot %s: ADD of pod %s: %s", boot, pod, r)
		}
		return a
	}

	// Boot A: 12 of the 13 addresses, and a sticky pod.
	var bootA []*attachment
	for i := 0; i < 12; i++ {
		bootA = append(bootA, mustAdd(conf, "A", fmt.Sprintf("a%d", i)))
	}
	web := mustAdd(sconf, "A", "web-0")
	other := mustAdd(sconf, "A", "other")
	n.assertOnly(nw, bootA)
	n.assertOnly(snw, []*attachment{web, other})

	// Reboot; one namespace of boot A survives (as if bind-mounted
	// somewhere persistent): its attachment must be kept.
	survivor := bootA[0]
	var gone []string
	for _, a := range append(bootA[1:], web, other) {
		gone = append(gone, a.netns)
	}
	reboot(t, gone, nw.bridge, snw.bridge)

	// Boot B: 12 more pods fit, because the 11 ghosts are released.
	var bootB []*attachment
	for i := 0; i < 12; i++ {
		bootB = append(bootB, mustAdd(conf, "B", fmt.Sprintf("b%d", i)))
	}
	n.assertOnly(nw, append([]*attachment{survivor}, bootB...), bootA[1:]...)
	// In the sticky network the reservations of boot A are kept for their
	// pods: a newcomer gets neither, and web-0 gets its own back under a
	// new container ID.
	newcomer := mustAdd(sconf, "B", "newcomer")
	if slices.Contains(newcomer.ips, web.ips[0]) || slices.Contains(newcomer.ips, other.ips[0]) {
		t.Errorf("newcomer got %v, kept for the sticky pods (%v, %v)", newcomer.ips, web.ips, other.ips)
	}
	web2 := mustAdd(sconf, "B", "web-0")
	if !slices.Equal(web2.ips, web.ips) {
		t.Errorf("sticky pod web-0 came back with %v, want its %v", web2.ips, web.ips)
	}
	held := map[string]bool{}
	for _, r := range n.state(snw.name, snw.bridge).reservations {
		held[r.ContainerID+" "+r.Addr.String()] = true
	}
	for _, a := range []*attachment{newcomer, web2, other} {
		if !held[a.cid+" "+a.ips[0].String()] || len(held) != 3 {
			t.Errorf("sticky network holds %v, want the addresses of newcomer, web-0 (new) and the kept ghost of other", held)
		}
	}
	// "other" never comes back: when the pool runs out its address yields
	// to a live pod. 13 addresses: web-0, newcomer and the ghost of other
	// hold 3, so the 11th filler needs the ghost's.
	live := []*attachment{newcomer, web2}
	for i := 0; i < 11; i++ {
		live = append(live, mustAdd(sconf, "B", fmt.Sprintf("filler%d", i)))
	}
	n.assertOnly(snw, live, web, other)

	// Reboot again with the reclaim turned off: the ghosts of boot B stay
	// and the pool is full (code 100) ...
	var gone2 []string
	for _, a := range bootB {
		gone2 = append(gone2, a.netns)
	}
	reboot(t, gone2, nw.bridge)
	if _, r := addAs(conf, "C", "c0", "CNIBOX_REBOOT_RECLAIM=off"); r.code != 100 {
		t.Errorf("boot C, $CNIBOX_REBOOT_RECLAIM=off: ADD %s, want error 100 (the ghosts of boot B fill the pool)", r)
	}
	off := []byte(strings.Replace(string(conf), `"ranges"`, `"reclaimAfterReboot":false,"ranges"`, 1))
	if _, r := addAs(off, "C", "c0"); r.code != 100 {
		t.Errorf("boot C, \"reclaimAfterReboot\": false: ADD %s, want error 100 (the ghosts of boot B fill the pool)", r)
	}
	// ... until an ADD with the reclaim on.
	c0 := mustAdd(conf, "C", "c0")
	n.assertOnly(nw, []*attachment{survivor, c0}, bootB...)

	for _, a := range []*attachment{survivor, c0} {
		n.del("bridge", conf, a, a.netns)
	}
	for _, a := range live {
		n.del("bridge", sconf, a, a.netns)
	}
	n.assertOnly(nw, nil)
	n.assertOnly(snw, nil)
}
