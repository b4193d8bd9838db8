//go:build kube

package whereabouts

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// reclaimLease reads the Lease cnibox-whereabouts-reclaim (nil: none yet).
func reclaimLease(t *testing.T, cs kubernetes.Interface) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), "cnibox-whereabouts-reclaim", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leaseState says who holds the Lease and how often it changed hands.
func leaseState(l *coordinationv1.Lease) (holder string, transitions int32) {
	if l == nil {
		return "", 0
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	return holder, transitions
}

// The reclaim of leaked addresses survives the loss of its leader: two
// agents with a short --cluster-ipam-reclaim-interval, the holder of the
// Lease cnibox-whereabouts-reclaim killed (SIGKILL, as a node that goes
// down: it renews nothing and releases nothing). The other agent takes the
// Lease (holderIdentity changes, leaseTransitions grows) and frees, within
// a minute or so, the addresses (and OverlappingRangeIPReservations) of
// the pods that are gone:
//   - a pod deleted while its node was down (the dead agent's node; the
//     Node object stays);
//   - a pod deleted with its node: the reclaim goes by pod existence only
//     (reclaim.go lists pods, never nodes), so a deleted node is seen
//     through its pods, which the pod GC deletes; there is no pod GC in
//     this control plane, so the test deletes the Node and then its pod as
//     the pod GC would;
//   - an ADD for a pod that was never created (through the survivor,
//     after the leader's death: nothing but the new leader can free it).
//
// The pods that still exist keep their addresses.
func TestKubeReclaimFailover(t *testing.T) {
	cnibox, agent := binaries(t)
	cs, kc := kubeCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	names := []string{"node1", "node2"}
	for _, name := range names {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 2 s: the Lease lasts 6 s (three intervals), long enough that a
	// loaded machine does not move it between live agents, short enough
	// that the test waits seconds.
	var nodes []*node
	for _, name := range names {
		nodes = append(nodes, startAgent(t, agent, name, "", "--kubeconfig-file", kc, "--cluster-ipam-reclaim-interval", "2s"))
	}
	byName := map[string]*node{nodes[0].name: nodes[0], nodes[1].name: nodes[1]}
	cb := cniboxPlugin(t, cnibox)
	const rng = "10.70.0.0/24"
	poolName := wbpool.PoolName(rng, "", "")
	conf := func(n *node) string {
		return `{"cniVersion":"1.0.0","name":"lan","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"` + rng +
			`","agentSocket":"` + n.socket + `"}}`
	}

	// Each node has a pod that will be deleted while the node is down, and
	// one that will go with its node. Only the leader's are leaked; the
	// other node's stay, and keep their addresses.
	pods := map[string]string{}
	for _, n := range nodes {
		pods["down-"+n.name], pods["gone-"+n.name] = n.name, n.name
	}
	createPods(t, cs, pods)
	got := map[string]string{} // pod name (= container ID) -> address
	for name, nodeName := range pods {
		out, err := cb.call(ctx, "ADD", name, "default/"+name, conf(byName[nodeName]))
		if err != nil {
			t.Fatal(err)
		}
		got[name] = firstIP(t, out)
	}

	var holder string
	var transitions int32
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		holder, transitions = leaseState(reclaimLease(t, cs))
		if byName[holder] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agent took the Lease cnibox-whereabouts-reclaim in 60 s (holder %q)", holder)
		}
	}
	leader := byName[holder]
	var survivor *node
	for _, n := range nodes {
		if n != leader {
			survivor = n
		}
	}
	kill9(t, "--socket", leader.socket) // cli_etcd_test.go
	if h, _ := leaseState(reclaimLease(t, cs)); h != leader.name {
		t.Fatalf("the Lease moved from %s to %q between reading it and killing %s: a live holder lost it (renewals late by two intervals?)", leader.name, h, leader.name)
	}
	t.Logf("killed the agent of %s, the Lease's holder (leaseTransitions %d)", leader.name, transitions)

	// The leader's node is down: one of its pods is deleted, then the node
	// with the other (the pod GC's part), and a pod that never existed gets
	// an address through the survivor.
	del := func(name string) {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	del("down-" + leader.name)
	deleted := time.Now()
	if err := cs.CoreV1().Nodes().Delete(ctx, leader.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	del("gone-" + leader.name)
	out, err := cb.call(ctx, "ADD", "ghost", "default/ghost", conf(survivor))
	if err != nil {
		t.Fatal(err)
	}
	got["ghost"] = firstIP(t, out)
	leaked := []string{"down-" + leader.name, "gone-" + leader.name, "ghost"}
	kept := []string{"down-" + survivor.name, "gone-" + survivor.name}

	held := func(pool map[string]wbpool.Allocation, name string) bool {
		a, ok := pool[got[name]]
		return ok && a.ContainerID == name && a.PodRef == "default/"+name
	}
	for {
		pool := ipPool(t, cs, poolName)
		var left []string
		for _, name := range leaked {
			if held(pool, name) {
				left = append(left, name)
			}
		}
		for _, pod := range reservations(t, cs) {
			for _, name := range leaked {
				if pod == "default/"+name {
					left = append(left, "the OverlappingRangeIPReservation of "+name)
				}
			}
		}
		h, n := leaseState(reclaimLease(t, cs))
		if len(left) == 0 && h == survivor.name && n > transitions {
			t.Logf("%s took the Lease (leaseTransitions %d -> %d) and freed the addresses of %v %s after the first deletion",
				survivor.name, transitions, n, leaked, time.Since(deleted).Round(time.Second))
			for _, name := range kept {
				if !held(pool, name) {
					t.Errorf("pod default/%s exists, yet lost its address %s: the IPPool says %+v", name, got[name], pool[got[name]])
				}
			}
			break
		}
		if time.Since(deleted) > 90*time.Second {
			sort.Strings(left)
			t.Fatalf("%s after the holder %s was killed and the pods deleted: the Lease is held by %q (leaseTransitions %d, was %d; want %s and more), still held: %v; the IPPool: %v",
				time.Since(deleted).Round(time.Second), leader.name, h, n, transitions, survivor.name, left, describe(pool))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// DEL of the living pods (twice) empties the pool.
	for _, name := range kept {
		for k := 0; k < 2; k++ {
			if _, err := cb.call(ctx, "DEL", name, "default/"+name, conf(survivor)); err != nil {
				t.Error(err)
			}
		}
	}
	if pool := ipPool(t, cs, poolName); len(pool) != 0 {
		t.Errorf("after DEL of the living pods the IPPool holds %v", describe(pool))
	}
}

// describe lists a pool's allocations, sorted: "ip=container(pod)".
func describe(pool map[string]wbpool.Allocation) []string {
	var out []string
	for ip, a := range pool {
		out = append(out, fmt.Sprintf("%s=%s(%s)", ip, a.ContainerID, a.PodRef))
	}
	slices.Sort(out)
	return out
}
