package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestConcurrentAdds: 200 ADDs at once (each a separate plugin process via
// libcni) on one /24 give 200 distinct addresses; after 200 DELs the store
// holds no reservation and no veth is left.
func TestConcurrentAdds(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 200
	e := newEnv(t)
	l := listFromJSON(t, `{"cniVersion":"1.1.0","name":"storm","plugins":[{"type":"bridge","bridge":"cbxstorm","isGateway":true,"ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.79.0.0/24"}]]}}]}`)
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = e.newPod(fmt.Sprintf("p%d", i))
	}
	results := make([]types.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.cni.AddNetworkList(context.Background(), l, p.rt)
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	ips := make([]netip.Addr, n)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		ips[i] = podIP(t, mustCurrent(t, results[i]), true)
		if j, dup := seen[ips[i]]; dup {
			t.Fatalf("pods %d and %d both got %s", j, i, ips[i])
		}
		seen[ips[i]] = i
	}
	if got := len(e.reservations(l.Name)); got != n {
		t.Errorf("store holds %d reservations after %d ADDs", got, n)
	}
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.cni.DelNetworkList(context.Background(), l, p.rt)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("%d reservations left after DEL", len(got))
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("%d veths left after DEL", len(got))
	}
	if got := masqEntries(t); len(got) != 0 {
		t.Errorf("%d masquerade entries left after DEL", len(got))
	}
}
