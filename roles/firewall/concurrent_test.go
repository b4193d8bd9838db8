package firewall_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// TestConcurrentDel: 120 attachments' rules in iptables' CNI-FORWARD, then
// their DELs 32 at a time; every DEL succeeds and no rule of any attachment
// stays. Each DEL finds its rules in a netlink dump of the chain, and the
// kernel resumes a dump by position: without the node's firewall lock, a
// rule deleted by another DEL during the dump shifted the rest and the dump
// skipped some (make bench's podman case left rules of 3 of 100 pods).
func TestConcurrentDel(t *testing.T) {
	resetNode(t)
	iptables(t, "-P", "FORWARD", "DROP")
	n := newNet(t, "fwcc")
	netns := n.NewPod("fwcc").Netns
	const pods = 120
	confs := make([][]byte, pods)
	ids := make([]chaintest.Pod, pods)
	for i := range pods {
		ids[i] = chaintest.Pod{ID: fmt.Sprintf("fwcc-%03d", i), Netns: netns}
		prev := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":%q}],"ips":[{"address":"10.77.%d.%d/16","interface":0}]}`, netns, i/200, i%200+10)
		confs[i] = n.fwConf([]byte(prev), nil)
		n.Must(firewall.Role, "ADD", ids[i], confs[i])
	}
	if got := strings.Count(iptables(t, "-S", "CNI-FORWARD"), "cnibox/"); got < pods {
		t.Fatalf("%d owned rules after %d ADDs", got, pods)
	}
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := n.Call(firewall.Role, "DEL", ids[i], confs[i]); err != nil {
					errs <- fmt.Errorf("DEL %s: %w", ids[i].ID, err)
				}
			}
		}()
	}
	for i := range pods {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if left := iptables(t, "-S", "CNI-FORWARD"); strings.Contains(left, "cnibox/") {
		t.Errorf("rules left after every DEL:\n%s", left)
	}
}
