package firewall_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// TestConcurrentDel: 120 attachments under iptables' FORWARD DROP, then
// their DELs 32 at a time; every DEL succeeds and no element of any
// attachment stays. (Before the maps each DEL found its rules in a netlink
// dump of CNI-FORWARD, which the kernel resumes by position: a rule deleted
// by another DEL meanwhile made the dump skip some, and make bench's podman
// case left rules of 3 of 100 pods. A DEL now gets and removes its own
// elements by key.)
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
	if got := strings.Count(fwMap(t, "pods4"), "comment \"cnibox/"); got != pods {
		t.Fatalf("%d elements in pods4 after %d ADDs", got, pods)
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
	waitMap(t, "pods4", func(m string) bool { return !strings.Contains(m, "cnibox/") })
}
