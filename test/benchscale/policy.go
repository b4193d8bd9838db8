package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/test/internal/policyload"
)

// With -pods and -policies (issue 41's policy rows), the kube run also
// writes that many pods (Running, each with its address, spread over the
// simulated nodes and the agent's own node, 100 a namespace) and
// NetworkPolicies (policyload's shape), and runs the agent twice, with
// --network-policy=false and with it on (the default), each on a fresh
// control plane. The policy-on row waits for the policy table's first sync
// (its time is reported) before the rest, and both rows report a pod churn:
// label changes of random pods at churnRate for churnTime, the bytes and
// CPU the agent spends per change.
const (
	podsPerNamespace = 100
	churnRate        = 100 // changes a second
	churnTime        = 10 * time.Second
	policyTable      = "cnibox-policy"
)

// policySides are the kube backend's agents of a policy run.
func policySides(bin string) []agentSide {
	return []agentSide{
		{name: "cnibox-agent-kube", bin: bin, args: []string{"--network-policy=false"}},
		{name: "cnibox-agent-kube", bin: bin, policy: true},
	}
}

func policyNamespaces(o *options) int { return max(1, (o.pods+podsPerNamespace-1)/podsPerNamespace) }

// populatePolicy writes the namespaces, pods and policies: pod j is on
// node j % (N+1), the last being the agent's own (selfCIDR).
func populatePolicy(o *options, cs kubernetes.Interface, ps []peer, selfCIDR netip.Prefix) error {
	ctx := context.Background()
	t := time.Now()
	nss := policyNamespaces(o)
	if err := policyload.Parallel(16, nss, func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pol%d", i), Labels: policyload.NamespaceLabels(i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	if err := policyload.Parallel(64, o.pods, func(j int) error {
		at, k := j%(len(ps)+1), j/(len(ps)+1)
		node, subnet, host := selfNode, selfCIDR, nodeIP
		if at < len(ps) {
			node, subnet, host = ps[at].name, ps[at].subnet, ps[at].ip
		}
		ip := subnet.Addr().As4()
		ip[2] += byte((k + 2) / 256)
		ip[3] = byte((k + 2) % 256)
		p := policyload.Pod(fmt.Sprintf("pol%d", j%nss), fmt.Sprintf("p%d", j), node, policyload.PodLabels(j, nss))
		p, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: "kube-scheduler"})
		if err != nil {
			return err
		}
		policyload.Running(p, netip.AddrFrom4(ip).String(), host.String())
		_, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	}); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	if err := policyload.Parallel(16, o.policies, func(k int) error {
		_, err := cs.NetworkingV1().NetworkPolicies(fmt.Sprintf("pol%d", k%nss)).Create(ctx, policyload.Policy(fmt.Sprintf("np%d", k), k, nss), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	o.logf("kube: %d pods in %d namespaces and %d policies created in %s", o.pods, nss, o.policies, time.Since(t))
	return nil
}

// policySynced waits for the agent's policy table to hold chains and then
// stop changing for 3 s; it returns when it was last seen to change (read
// every second: listing every set's elements is not free at 50,000 pods).
func policySynced(a *agent, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	last, since := "", time.Now()
	for {
		if err := a.exited(); err != nil {
			return since, err
		}
		sig, chains, err := tableSignature()
		if err != nil {
			return since, err
		}
		if sig != last {
			last, since = sig, time.Now()
		}
		if chains > 0 && time.Since(since) >= 3*time.Second {
			return since, nil
		}
		if time.Now().After(deadline) {
			return since, fmt.Errorf("the policy table is not synced after %s (%d policy chains):\n%s", timeout, chains, a.logTail())
		}
		time.Sleep(time.Second)
	}
}

// tableSignature summarises the policy table (chain and set names with
// each set's element count) and counts its policy chains.
func tableSignature() (string, int, error) {
	conn, err := nftables.New()
	if err != nil {
		return "", 0, err
	}
	defer conn.CloseLasting()
	chains, err := conn.ListChains()
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	k := 0
	for _, ch := range chains {
		if ch.Table.Name != policyTable {
			continue
		}
		b.WriteString(ch.Name + " ")
		if strings.HasPrefix(ch.Name, "n-") {
			k++
		}
	}
	t := &nftables.Table{Name: policyTable, Family: nftables.TableFamilyINet}
	sets, err := conn.GetSets(t)
	if err != nil {
		return b.String(), k, nil // no table yet
	}
	for _, s := range sets {
		els, err := conn.GetSetElements(s)
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(&b, "%s:%d ", s.Name, len(els))
	}
	return b.String(), k, nil
}

// exited is the agent's exit, if it has ended.
func (a *agent) exited() error {
	if ended, err := a.proc.Exited(); ended {
		return fmt.Errorf("the agent exited (%v)", err)
	}
	return nil
}

// podChurn changes the tier label of random pods at churnRate for
// churnTime, and returns the bytes the agent read and its CPU per change.
func podChurn(o *options, cs kubernetes.Interface, a *agent, px *countingProxy) (bytes, cpuMS float64, err error) {
	ctx := context.Background()
	nss := policyNamespaces(o)
	quiet(px, 2*time.Second)
	b0 := px.read.Load()
	_, _, c0 := a.usage()
	n := int(churnTime.Seconds() * churnRate)
	tick := time.NewTicker(time.Second / churnRate)
	defer tick.Stop()
	errs := make(chan error, n)
	for i := range n {
		<-tick.C
		j := rand.IntN(o.pods)
		patch := fmt.Sprintf(`{"metadata":{"labels":{"tier":"t%d"}}}`, i%3)
		go func() {
			_, err := cs.CoreV1().Pods(fmt.Sprintf("pol%d", j%nss)).Patch(ctx, fmt.Sprintf("p%d", j), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			errs <- err
		}()
	}
	for range n {
		if e := <-errs; e != nil && err == nil {
			err = fmt.Errorf("pod churn: %w", e)
		}
	}
	quiet(px, 2*time.Second)
	_, _, c1 := a.usage()
	o.logf("kube: pod churn of %d changes done", n)
	return float64(px.read.Load()-b0) / float64(n), float64((c1 - c0).Microseconds()) / 1000 / float64(n), err
}
