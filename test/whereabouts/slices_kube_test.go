//go:build kube

package whereabouts

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// nodeSlicePool reads a NodeSlicePool as the API holds it: its spec and
// every slice as a map of its JSON fields (nil: none).
func nodeSlicePool(t *testing.T, cs kubernetes.Interface, name string) (spec map[string]string, slices []map[string]string) {
	t.Helper()
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/nodeslicepools/" + name).DoRaw(context.Background())
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		Spec   map[string]string `json:"spec"`
		Status struct {
			Allocations []map[string]string `json:"allocations"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("NodeSlicePool %s: %v\n%s", name, err, b)
	}
	return o.Spec, o.Status.Allocations
}

// ipPoolRange reads an IPPool's spec.range.
func ipPoolRange(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var o struct {
		Spec struct {
			Range string `json:"range"`
		} `json:"spec"`
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/ippools/" + name).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("IPPool %s: %v", name, err)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return o.Spec.Range
}

// poolHolds waits until the IPPool holds exactly want (address -> container
// ID): a node slice's pool is written behind the ADDs and DELs.
func poolHolds(t *testing.T, cs kubernetes.Interface, name string, want map[string]string) {
	t.Helper()
	var got map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got = map[string]string{}
		for ip, a := range ipPool(t, cs, name) {
			got[ip] = a.ContainerID
		}
		if reflect.DeepEqual(got, want) || (len(got) == 0 && len(want) == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IPPool %s holds %v, want %v", name, got, want)
		}
	}
}

// Node slices on the Kubernetes backend: two agents ("nodes") started with
// --cluster-ipam-node-slice-size /26, a network with node_slice_size /28
// and one without (sliced by the agents' default): the ADDs of each node
// get addresses of its own slice (the whole range's prefix length), the
// NodeSlicePool lists each node's slice as whereabouts' node slice
// controller writes it, the IPPool of each node's slice (whereabouts'
// name, spec.range the slice, offsets from it) holds the node's
// allocations, whereabouts v0.9.4's own binary on node1 allocates in
// node1's slice from these objects, and a range no larger than a slice
// keeps its plain pool. DEL (twice) frees every address.
func TestKubeNodeSlices(t *testing.T) {
	cnibox, agent := binaries(t)
	cs, kc, flat := sideBySide(t)
	var nodes []*node
	for _, name := range []string{"node1", "node2"} {
		nodes = append(nodes, startAgent(t, agent, name, "", "--kubeconfig-file", kc, "--cluster-ipam-node-slice-size", "/26"))
	}
	cb := cniboxPlugin(t, cnibox)

	type network struct {
		name, ipam string // the config's name, its ipam fields but type and agentSocket
		rng        string
		// nodeSlicePool, sliceSize and poolPrefix: the NodeSlicePool and
		// the per-node IPPools' names ("<prefix><node>-<slice>"); none: a
		// plain pool
		nodeSlicePool, sliceSize, poolPrefix string
	}
	nets := []network{
		{name: "blue-net", ipam: `"range":"10.70.0.0/24","node_slice_size":"/28","network_name":"blue"`, rng: "10.70.0.0/24",
			nodeSlicePool: "blue", sliceSize: "/28", poolPrefix: "blue-"},
		// No node_slice_size: the agents' default.
		{name: "green", ipam: `"range":"10.71.0.0/24"`, rng: "10.71.0.0/24", nodeSlicePool: "green", sliceSize: "/26"},
		// No larger than a /26 slice: the plain pool.
		{name: "small", ipam: `"range":"10.72.0.0/26"`, rng: "10.72.0.0/26"},
	}
	conf := func(n network, socket string) string {
		s := `{"cniVersion":"0.3.1","name":"` + n.name + `","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts",` + n.ipam
		if socket != "" {
			s += `,"agentSocket":"` + socket + `"`
		} else {
			s += `,"configuration_path":"` + flat + `"`
		}
		return s + `}}`
	}
	const perNode = 4
	type att struct {
		net  network
		node *node
		cid  string
	}
	var atts []att
	pods := map[string]string{}
	for _, n := range nets {
		for _, nd := range nodes {
			for i := 0; i < perNode; i++ {
				a := att{n, nd, fmt.Sprintf("%s-%s-%d", n.name, nd.name, i)}
				atts = append(atts, a)
				pods[a.cid] = nd.name
			}
		}
	}
	pods["by-whereabouts"] = "node1"
	createPods(t, cs, pods) // the reclaim would free the addresses of pods that do not exist
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Every ADD at once, on both nodes.
	var mu sync.Mutex
	got := map[string]netip.Prefix{} // container -> address
	var wg sync.WaitGroup
	for _, a := range atts {
		wg.Add(1)
		go func(a att) {
			defer wg.Done()
			out, err := cb.call(ctx, "ADD", a.cid, "default/"+a.cid, conf(a.net, a.node.socket))
			if err != nil {
				t.Error(err)
				return
			}
			var r struct {
				IPs []struct{ Address string } `json:"ips"`
			}
			if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
				t.Errorf("ADD %s: result %s, %v", a.cid, out, err)
				return
			}
			p, err := netip.ParsePrefix(r.IPs[0].Address)
			if err != nil {
				t.Errorf("ADD %s: %v", a.cid, err)
				return
			}
			mu.Lock()
			got[a.cid] = p
			mu.Unlock()
		}(a)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[netip.Addr]string{}
	for cid, p := range got {
		if other, dup := seen[p.Addr()]; dup {
			t.Errorf("DUPLICATE: %s handed out to %s and %s", p.Addr(), other, cid)
		}
		seen[p.Addr()] = cid
	}

	// node -> its slice, per network; and what each pool must hold.
	sliceOf := map[string]map[string]netip.Prefix{}
	wantPools := map[string]map[string]string{}
	for _, n := range nets {
		rng := netip.MustParsePrefix(n.rng)
		for _, a := range atts {
			if p := got[a.cid]; a.net.name == n.name && (p.Bits() != rng.Bits() || !rng.Contains(p.Addr())) {
				t.Errorf("%s of %s: want an address of %s with its prefix length", p, a.cid, rng)
			}
		}
		spec, slices := nodeSlicePool(t, cs, n.nodeSlicePool)
		if n.nodeSlicePool == "" {
			if spec, _ := nodeSlicePool(t, cs, n.name); spec != nil {
				t.Errorf("network %s (range %s, no larger than a slice) has a NodeSlicePool: %v", n.name, n.rng, spec)
			}
			want := map[string]string{}
			for _, a := range atts {
				if a.net.name == n.name {
					want[got[a.cid].Addr().String()] = a.cid
				}
			}
			wantPools[strings.NewReplacer("/", "-").Replace(n.rng)] = want
			continue
		}
		// As whereabouts' node slice controller writes it: spec {range,
		// sliceSize}, status.allocations every slice in address order as
		// {nodeName, sliceRange}, "" for a free one. Each node leases the
		// lowest free slice.
		if want := map[string]string{"range": n.rng, "sliceSize": n.sliceSize}; !reflect.DeepEqual(spec, want) {
			t.Errorf("NodeSlicePool %s: spec %v, want %v", n.nodeSlicePool, spec, want)
		}
		divided, err := wbpool.DivideRange(rng, n.sliceSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(slices) != len(divided) {
			t.Fatalf("NodeSlicePool %s: %d slices %v, want the %d of %s by %s", n.nodeSlicePool, len(slices), slices, len(divided), n.rng, n.sliceSize)
		}
		sliceOf[n.name] = map[string]netip.Prefix{}
		var leased []string
		for i, s := range slices {
			if len(s) != 2 || s["sliceRange"] != divided[i].String() {
				t.Errorf("NodeSlicePool %s: slice %d is %v, want {nodeName, sliceRange: %s}", n.nodeSlicePool, i, s, divided[i])
			}
			if node, ok := s["nodeName"]; ok && node != "" {
				leased = append(leased, node)
				sliceOf[n.name][node] = divided[i]
				if i > 1 {
					t.Errorf("NodeSlicePool %s: %s leased slice %d, not one of the two lowest", n.nodeSlicePool, node, i)
				}
			}
		}
		sort.Strings(leased)
		if !reflect.DeepEqual(leased, []string{"node1", "node2"}) {
			t.Fatalf("NodeSlicePool %s: slices leased to %v, want one to node1 and one to node2: %v", n.nodeSlicePool, leased, slices)
		}
		for _, nd := range nodes {
			slice := sliceOf[n.name][nd.name]
			// whereabouts' IPPoolName for a node's slice.
			pool := n.poolPrefix + nd.name + "-" + strings.NewReplacer("/", "-").Replace(slice.String())
			want := map[string]string{}
			for _, a := range atts {
				if a.net.name == n.name && a.node == nd {
					if !slice.Contains(got[a.cid].Addr()) {
						t.Errorf("%s of %s on %s: outside the node's slice %s", got[a.cid], a.cid, nd.name, slice)
					}
					want[got[a.cid].Addr().String()] = a.cid
				}
			}
			poolHolds(t, cs, pool, want)
			if r := ipPoolRange(t, cs, pool); r != slice.String() {
				t.Errorf("IPPool %s: spec.range %q, want the slice %s", pool, r, slice)
			}
			wantPools[pool] = want
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// whereabouts' own binary on node1 (NODENAME), on the network with
	// node_slice_size, finds node1's slice in the NodeSlicePool and takes
	// the next address of node1's IPPool. (Only cnibox's DELs run on node1
	// meanwhile: a node runs whereabouts' node slices or cnibox's, not
	// both.)
	wb := plugin{path: wbBin, argv0: "whereabouts", quietDel: true}
	blue := nets[0]
	slice1 := sliceOf[blue.name]["node1"]
	out, err := wb.call(ctx, "ADD", "by-whereabouts", "default/by-whereabouts", conf(blue, ""), "NODENAME=node1")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
		t.Fatalf("whereabouts on node1: result %s, %v", out, err)
	}
	want := slice1.Addr()
	for i := 0; i <= perNode; i++ {
		want = want.Next()
	}
	if r.IPs[0].Address != netip.PrefixFrom(want, 24).String() {
		t.Errorf("whereabouts on node1: %s, want %s/24 (node1's slice %s after cnibox's %d)", out, want, slice1, perNode)
	}
	wbIP := want.String()
	node1Blue := blue.poolPrefix + "node1-" + strings.NewReplacer("/", "-").Replace(slice1.String())
	wantPools[node1Blue][wbIP] = "by-whereabouts"
	poolHolds(t, cs, node1Blue, wantPools[node1Blue])

	// DEL, twice each, on both nodes at once: every pool empties but for
	// whereabouts' address, then whereabouts releases it.
	for _, a := range atts {
		wg.Add(1)
		go func(a att) {
			defer wg.Done()
			for k := 0; k < 2; k++ {
				if _, err := cb.call(ctx, "DEL", a.cid, "default/"+a.cid, conf(a.net, a.node.socket)); err != nil {
					t.Error(err)
				}
			}
		}(a)
	}
	wg.Wait()
	for pool := range wantPools {
		left := map[string]string{}
		if pool == node1Blue {
			left[wbIP] = "by-whereabouts"
		}
		poolHolds(t, cs, pool, left)
	}
	if _, err := wb.call(ctx, "DEL", "by-whereabouts", "default/by-whereabouts", conf(blue, ""), "NODENAME=node1"); err != nil {
		t.Fatal(err)
	}
	poolHolds(t, cs, node1Blue, map[string]string{})
}
