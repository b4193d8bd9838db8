package flannel_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/flannel"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
)

// flannelConf is the seed's flannel plugin (hairpin, default gateway) on a
// bridge of the test's own.
func flannelConf(version, bridge string) string {
	return `{"cniVersion":"` + version + `","name":"cbr0","type":"flannel","delegate":{"bridge":"` + bridge + `","hairpinMode":true,"isDefaultGateway":true}}`
}

// TestFlannelAddCheckDel: the delegate is bridge + host-local on the node
// subnet with flannel's MTU, recorded in the store; two pods reach each
// other; CHECK passes; DEL twice frees everything and drops the record.
func TestFlannelAddCheckDel(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.7.1/24")
	conf := flannelConf("1.1.0", "fl-acd")
	a, b := n.NewPod("a"), n.NewPod("b")
	ra, rb := n.Add(flannel.Role, a, conf), n.Add(flannel.Role, b, conf)
	ipa, ipb := delegatetest.IP(t, ra, "eth0"), delegatetest.IP(t, rb, "eth0")
	subnet := netip.MustParsePrefix("10.244.7.0/24")
	if ipa == ipb || !subnet.Contains(ipa) || !subnet.Contains(ipb) || ipa == netip.MustParseAddr("10.244.7.1") {
		t.Fatalf("pod addresses %s, %s: want two distinct addresses of %s other than the gateway", ipa, ipb, subnet)
	}
	if ra.IPs[0].Gateway.String() != "10.244.7.1" {
		t.Errorf("gateway = %v, want 10.244.7.1", ra.IPs[0].Gateway)
	}
	if l := delegatetest.Links(t, a.Netns)["eth0"]; l.MTU != 1450 {
		t.Errorf("pod eth0 MTU = %d, want FLANNEL_MTU 1450", l.MTU)
	}
	br := delegatetest.Links(t, "")["fl-acd"]
	if br.Kind != "bridge" {
		t.Fatalf("bridge fl-acd not created: %+v", br)
	}
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if addrs, _ := h.Addrs("fl-acd"); !slices.Contains(addrs, netip.MustParsePrefix("10.244.7.1/24")) {
		t.Errorf("bridge addresses %v, want the gateway 10.244.7.1/24 (isGateway)", addrs)
	}
	pod, err := netops.Open(a.Netns)
	if err != nil {
		t.Fatal(err)
	}
	routes, _ := pod.Routes("eth0")
	pod.Close()
	var dsts []string
	for _, r := range routes {
		dsts = append(dsts, r.Dst.String())
	}
	if !slices.Contains(dsts, "10.244.0.0/16") || !slices.Contains(dsts, "0.0.0.0/0") {
		t.Errorf("pod routes %v, want the cluster network 10.244.0.0/16 and a default route (isDefaultGateway)", dsts)
	}
	for _, l := range delegatetest.Links(t, "") {
		if l.MasterIndex == br.Index && !l.Hairpin {
			t.Errorf("port %s of the bridge has no hairpin (delegate.hairpinMode)", l.Name)
		}
	}

	recs := n.Records("cbr0")
	if len(recs) != 2 || recs[0].Plugin != "flannel" || len(recs[0].Delegates) != 1 {
		t.Fatalf("records %+v, want one flannel record per pod", recs)
	}
	var d map[string]any
	json.Unmarshal(recs[0].Delegates[0].Conf, &d)
	if d["type"] != "bridge" || d["isGateway"] != true || d["ipMasq"] != false || d["mtu"] != float64(1450) || d["name"] != "cbr0" {
		t.Errorf("recorded delegate %s: want bridge, isGateway, ipMasq false (flanneld masquerades), mtu 1450, name cbr0", recs[0].Delegates[0].Conf)
	}

	if err := nstest.Reachable(t, a.Netns, b.Netns, ipb); err != nil {
		t.Errorf("pod a cannot reach pod b at %s: %v", ipb, err)
	}
	if err := nstest.Reachable(t, b.Netns, a.Netns, ipa); err != nil {
		t.Errorf("pod b cannot reach pod a at %s: %v", ipa, err)
	}
	n.Must(flannel.Role, "CHECK", a, delegatetest.WithPrev(t, conf, ra))
	n.Must(flannel.Role, "STATUS", delegatetest.Pod{}, conf)

	for _, p := range []delegatetest.Pod{a, b} {
		n.Must(flannel.Role, "DEL", p, delegatetest.WithPrev(t, conf, ra))
		n.Must(flannel.Role, "DEL", p, conf)
	}
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := n.Records("cbr0"); len(got) != 0 {
		t.Errorf("records left after DEL: %+v", got)
	}
}

// TestFlannelDelWithoutRecord: a DEL whose delegate record is lost still
// frees the address, rebuilt from subnet.env, and even with subnet.env gone
// too (host-local releases by owner).
func TestFlannelDelWithoutRecord(t *testing.T) {
	n, path := delegatetest.FlannelNode(t, "10.244.8.1/24")
	conf := flannelConf("0.3.1", "fl-norec")
	a, b := n.NewPod("a"), n.NewPod("b")
	n.Add(flannel.Role, a, conf)
	n.Add(flannel.Role, b, conf)

	n.DeleteRecord("cbr0", a)
	n.Must(flannel.Role, "DEL", a, conf)
	if got := n.Reservations("cbr0"); len(got[a.ID]) != 0 || len(got[b.ID]) != 1 {
		t.Errorf("reservations after DEL of a without its record: %v, want only b's", got)
	}
	if _, ok := delegatetest.Links(t, a.Netns)["eth0"]; ok {
		t.Error("pod a still has eth0 after DEL")
	}

	n.DeleteRecord("cbr0", b)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := n.Call(flannel.Role, "DEL", b, conf)
	if err != nil {
		t.Fatalf("DEL without record and subnet.env: %v", err)
	}
	if !strings.Contains(stderr, path) {
		t.Errorf("stderr %q does not say that %s is missing", stderr, path)
	}
	n.Must(flannel.Role, "DEL", b, conf)
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations left after DEL without record and subnet.env: %v", got)
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
}

// TestFlannelNotReady: before flanneld writes subnet.env, ADD is error 11 and
// STATUS 50, both naming the file; once it exists, both work.
func TestFlannelNotReady(t *testing.T) {
	n := delegatetest.NewNode(t)
	path := filepath.Join(t.TempDir(), "subnet.env")
	n.Env[flannel.EnvFlannelSubnetFile] = path
	conf := flannelConf("1.1.0", "fl-ready")
	p := n.NewPod("a")
	_, _, err := n.Call(flannel.Role, "ADD", p, conf)
	if cniplug.CodeOf(err) != 11 || !strings.Contains(err.Error(), path) {
		t.Errorf("ADD without subnet.env = %v (code %d), want code 11 naming %s", err, cniplug.CodeOf(err), path)
	}
	_, _, err = n.Call(flannel.Role, "STATUS", delegatetest.Pod{}, conf)
	if cniplug.CodeOf(err) != 50 || !strings.Contains(err.Error(), path) {
		t.Errorf("STATUS without subnet.env = %v (code %d), want code 50 naming %s", err, cniplug.CodeOf(err), path)
	}
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations after the failed ADD: %v", got)
	}
	if err := os.WriteFile(path, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\nFLANNEL_MTU=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = n.Call(flannel.Role, "ADD", p, conf)
	if cniplug.CodeOf(err) != 6 || !strings.Contains(err.Error(), path+" line 3") {
		t.Errorf("ADD with a bad subnet.env = %v (code %d), want code 6 naming %s line 3", err, cniplug.CodeOf(err), path)
	}
	delegatetest.WriteSubnetEnv(t, path, "10.244.9.1/24")
	n.Must(flannel.Role, "STATUS", delegatetest.Pod{}, conf)
	n.Add(flannel.Role, p, conf)
	n.Must(flannel.Role, "DEL", p, conf)
	n.Must(flannel.Role, "DEL", p, conf)
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// TestFlannelGC: GC keeps the listed pod and removes the other's veth,
// address and record.
func TestFlannelGC(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.10.1/24")
	conf := flannelConf("1.1.0", "fl-gc")
	a, b := n.NewPod("a"), n.NewPod("b")
	ra := n.Add(flannel.Role, a, conf)
	n.Add(flannel.Role, b, conf)
	n.Must(flannel.Role, "GC", delegatetest.Pod{}, delegatetest.WithKeep(t, conf, a))
	res := n.Reservations("cbr0")
	if len(res[a.ID]) != 1 || len(res[b.ID]) != 0 {
		t.Errorf("reservations after GC keeping a: %v, want a's only", res)
	}
	if got := delegatetest.Veths(t); len(got) != 1 {
		t.Errorf("veths after GC: %v, want a's only", got)
	}
	n.CheckKept(flannel.Role, "cbr0", a, conf, ra)
}

// TestFlannelDelBadConfigNoRecord: a config that ADD refuses never set
// anything up, so its DEL (without a record) succeeds; CHECK reports it.
func TestFlannelDelBadConfigNoRecord(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.11.1/24")
	bad := `{"cniVersion":"1.1.0","name":"cbr0","type":"flannel","delegate":{"name":"x"}}`
	p := n.NewPod("a")
	if _, _, err := n.Call(flannel.Role, "ADD", p, bad); cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "delegate.name") {
		t.Errorf("ADD = %v, want code 7 naming delegate.name", err)
	}
	n.Must(flannel.Role, "DEL", p, bad)
	n.Must(flannel.Role, "DEL", p, bad)
	if _, _, err := n.Call(flannel.Role, "CHECK", p, bad); cniplug.CodeOf(err) != 7 {
		t.Errorf("CHECK = %v, want code 7", err)
	}
}

// TestFlannelScratchRecord: on a node that ran flannel's own plugin (its
// dataDir exists), ADD also writes flannel's record of the sandbox, the
// delegate config flannel's plugin reads on DEL; DEL of a pod that has only
// flannel's record (set up before the move) replays that config, frees the
// address and removes the file, as flannel's plugin would.
func TestFlannelScratchRecord(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.9.1/24")
	dir := n.Env[flannel.EnvFlannelDataDir]
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := flannelConf("1.0.0", "fl-scr")
	a, b := n.NewPod("a"), n.NewPod("b")
	n.Add(flannel.Role, a, conf)
	n.Add(flannel.Role, b, conf)
	recs := n.Records("cbr0")
	if len(recs) != 2 {
		t.Fatalf("records %+v, want two", recs)
	}
	for _, r := range recs {
		got, err := os.ReadFile(filepath.Join(dir, r.ContainerID))
		if err != nil {
			t.Fatalf("flannel's record of %s: %v", r.ContainerID, err)
		}
		if string(got) != string(r.Delegates[0].Conf) {
			t.Errorf("flannel's record of %s = %s, want the delegate config %s", r.ContainerID, got, r.Delegates[0].Conf)
		}
	}

	// b as flannel's plugin left it: only flannel's record
	n.DeleteRecord("cbr0", b)
	for _, p := range []delegatetest.Pod{a, b} {
		n.Must(flannel.Role, "DEL", p, conf)
		if _, err := os.Stat(filepath.Join(dir, p.ID)); !os.IsNotExist(err) {
			t.Errorf("flannel's record of %s after DEL: %v, want it removed", p.ID, err)
		}
	}
	if got := n.Reservations("cbr0"); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left in flannel's dataDir: %v", left)
	}
}
