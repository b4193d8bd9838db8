package reliability

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// crashConf is a bridge network with every kernel step the bridge role has:
// gateway, masquerade, MAC spoof check, hairpin, dual stack from host-local.
// Each run gets a network and bridge of its own, so a failure stays in its run.
func crashConf(i int) (tnet, []byte) {
	nw := tnet{name: fmt.Sprintf("crash%d", i), bridge: fmt.Sprintf("cbxcrash%d", i)}
	return nw, []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":%q,
	"isGateway":true,"ipMasq":true,"macspoofchk":true,"hairpinMode":true,
	"ipam":{"type":"host-local","ranges":[[{"subnet":"10.91.%d.0/24"}],[{"subnet":"fd91:0:0:%x::/64"}]]}}`, nw.name, nw.bridge, i, i))
}

// The fault points of ADD and DEL, in the order a call passes them.
var (
	addPoints = []string{
		"hostlocal/add/after-reserve", // inside the store transaction: nothing committed
		"bridge/add/after-ipam",       // reservation and endpoint record committed
		"bridge/add/after-bridge",
		"bridge/add/after-veth",
		"bridge/add/after-macspoof",
		"bridge/add/after-addresses",
		"bridge/add/after-masq",
	}
	delPoints = []string{
		"bridge/del/after-masq",       // before the addresses are freed
		"hostlocal/del/after-release", // inside the store transaction: nothing committed
		"bridge/del/after-ipam",       // reservation released, endpoint record deleted
		"bridge/del/after-macspoof",
		"bridge/del/after-veth",
	}
)

// What a runtime does after an ADD that died.
var addOutcomes = []string{
	"retry ADD",                   // CRI retries the sandbox's network setup, then tears down
	"DEL",                         // the runtime tears the failed sandbox down
	"DEL after the netns is gone", // ... after it removed the namespace (containerd's second DEL)
	"GC",                          // the attachment is forgotten; the next GC cleans up
}

// What a runtime does after a DEL that died.
var delOutcomes = []string{"DEL", "GC"}

// TestCrashConsistency kills the bridge (+ host-local) plugin with SIGKILL at
// every fault point of ADD and DEL, then does what a runtime does and checks
// that nothing leaked: no reservation, endpoint record, veth, masquerade
// entry or MAC spoof chain of the attachment is left, no address is held
// twice, the store passes `cnibox store check`, and a bystander pod on the
// same network is untouched throughout.
func TestCrashConsistency(t *testing.T) {
	n := newNode(t, faultBin(t))
	parent := t
	var (
		mu    sync.Mutex
		table []string
		runs  int
	)
	record := func(t *testing.T, point, outcome, what string) {
		mu.Lock()
		defer mu.Unlock()
		runs++
		if t.Failed() {
			what = "FAILED (see the test log)"
		}
		table = append(table, fmt.Sprintf("| `%s` | %s | %s |", point, outcome, what))
	}
	// scenario runs one crash: before adds the bystander (and, for DEL
	// points, the victim); crash and after are the runtime's story.
	scenario := func(t *testing.T, i int, point, verb, outcome string) {
		n.t = t
		defer func() { n.t = parent }()
		nw, conf := crashConf(i)
		bystander := n.add("bridge", conf, uniq("bystander"), newNS(t))
		keep := []*attachment{bystander}
		netns := newNS(t)
		a := &attachment{cid: uniq("crash"), ifname: "eth0", netns: netns}
		c := call{role: "bridge", verb: verb, conf: conf, cid: a.cid, netns: netns, ifname: "eth0", env: []string{"CNIBOX_FAULT=" + point}}
		if verb == "DEL" {
			a = n.add("bridge", conf, a.cid, netns)
			c.conf = withPrev(t, conf, a.prev)
		}
		if r := n.run(c); !r.killed {
			t.Fatalf("fault point %s not reached: %s %s", point, verb, r)
		}
		what := ""
		switch outcome {
		case "retry ADD":
			r := n.run(call{role: "bridge", verb: "ADD", conf: conf, cid: a.cid, netns: netns, ifname: "eth0"})
			if r.code != 0 {
				t.Errorf("retried ADD: %s", r)
				n.gc("bridge", conf, keep...) // leave the next runs a clean node
				break
			}
			a.prev, a.ips = r.out, resultIPs(t, r.out)
			n.assertOnly(nw, append(keep, a))
			n.check("bridge", conf, a)
			what = fmt.Sprintf("ADD ok (%d addresses, none duplicate), CHECK ok, ", len(a.ips))
			n.del("bridge", conf, a, netns)
			what += "DEL x2 ok"
		case "DEL":
			n.del("bridge", conf, a, netns)
			what = "DEL x2 ok"
		case "DEL after the netns is gone":
			removeNS(t, netns)
			n.del("bridge", conf, a, "")
			what = "DEL x2 without netns ok"
		case "GC":
			n.gc("bridge", conf, keep...)
			what = "GC ok"
		}
		n.assertOnly(nw, keep, a)
		n.check("bridge", conf, bystander)
		n.del("bridge", conf, bystander, bystander.netns)
		n.assertOnly(nw, nil, a, bystander)
		record(t, point, verb+" killed, then "+outcome, what+"; nothing left")
	}

	i := 0
	for _, point := range addPoints {
		for _, outcome := range addOutcomes {
			i++
			t.Run("ADD "+point+" then "+outcome, func(t *testing.T) { scenario(t, i, point, "ADD", outcome) })
		}
	}
	for _, point := range delPoints {
		for _, outcome := range delOutcomes {
			i++
			t.Run("DEL "+point+" then "+outcome, func(t *testing.T) { scenario(t, i, point, "DEL", outcome) })
		}
	}
	t.Logf("fault point x runtime action -> outcome (%d runs):\n%s", runs, strings.Join(table, "\n"))
}

// newNS creates a pod namespace removed at the end of the test.
func newNS(t testing.TB) string {
	t.Helper()
	name := uniq("rel")
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netops.DeleteNamedNS(name) })
	nstest.SetBaseSysctls(t, path)
	return path
}

// removeNS removes a namespace made by newNS before the test ends.
func removeNS(t testing.TB, path string) {
	t.Helper()
	name := path[strings.LastIndexByte(path, '/')+1:]
	if err := netops.DeleteNamedNS(name); err != nil {
		t.Fatal(err)
	}
}
