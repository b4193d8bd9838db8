//go:build kube

package node

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

// clusterNet is the pod network (net-conf.json's Network).
var clusterNet = netip.MustParsePrefix("10.244.0.0/16")

// checkLeftovers compares, on every node, what cnibox left with the pods
// that exist: host veths, routes into the pod network, the store's
// reservations and endpoint records, the whereabouts IPPools'
// allocations, and the addresses in cnibox's nftables sets and maps
// (portmap, policy, masquerade).
func (s *soak) checkLeftovers() {
	c := s.c
	var list corev1.PodList
	if err := json.Unmarshal([]byte(c.must("get", "pods", "-A", "-o", "json")), &list); err != nil {
		s.t.Fatal(err)
	}
	pods := map[string]bool{}  // ns/name
	onNode := map[string]int{} // node -> interfaces of its pods (veths)
	addrs := map[string]bool{} // every pod address, primary and secondary
	for _, p := range list.Items {
		if p.Spec.HostNetwork {
			continue
		}
		pods[p.Namespace+"/"+p.Name] = true
		onNode[p.Spec.NodeName]++
		addrs[p.Status.PodIP] = true
		for _, st := range networkStatus(p) {
			if !st.Default {
				onNode[p.Spec.NodeName]++
				for _, ip := range st.IPs {
					addrs[ip] = true
				}
			}
		}
	}
	podCIDRs := map[string]netip.Prefix{}
	for _, n := range c.nodes {
		podCIDRs[n.name] = c.podCIDR(n)
	}
	for _, n := range c.nodes {
		// veths: each pod interface has one; eth0 is the node's own NIC
		out, err := n.onNode("ip", "-j", "link", "show", "type", "veth")
		if err != nil {
			s.breach("leak", "%s: ip link: %v", n.name, err)
			continue
		}
		var links []struct {
			Name string `json:"ifname"`
		}
		json.Unmarshal([]byte(out), &links)
		var veths []string
		for _, l := range links {
			if l.Name != "eth0" {
				veths = append(veths, l.Name)
			}
		}
		if len(veths) != onNode[n.name] {
			s.breach("leak", "%s: %d host veths for %d pod interfaces: %v", n.name, len(veths), onNode[n.name], veths)
		}
		// routes into the pod network: the node's podCIDR on cni0 and each
		// other node's via flannel.1, nothing else
		out, _ = n.onNode("ip", "-j", "-4", "route", "show")
		var routes []struct {
			Dst string `json:"dst"`
			Dev string `json:"dev"`
		}
		json.Unmarshal([]byte(out), &routes)
		want := map[string]bool{}
		for name, cidr := range podCIDRs {
			want[cidr.String()] = name != n.name // false: our own
		}
		for _, r := range routes {
			dst, err := netip.ParsePrefix(r.Dst)
			if err != nil {
				if a, err2 := netip.ParseAddr(r.Dst); err2 == nil {
					dst = netip.PrefixFrom(a, 32)
				} else {
					continue
				}
			}
			if !clusterNet.Overlaps(dst) || dst == clusterNet {
				continue
			}
			if _, ok := want[dst.String()]; !ok {
				s.breach("leak", "%s: route %s dev %s, not a node's podCIDR", n.name, r.Dst, r.Dev)
			}
		}
		// the store: every reservation and endpoint record names a pod
		reserved, endpoints := nodeState(s.t, n)
		leaked := map[string]bool{}
		for k := range reserved {
			if f := strings.Fields(k); len(f) < 3 || !pods[f[2]] {
				s.breach("leak", "%s: store reservation %q of a pod that is gone", n.name, k)
				leaked[k] = true
			}
		}
		for k := range endpoints {
			if f := strings.Fields(k); len(f) < 3 || !pods[f[2]] {
				s.breach("leak", "%s: store endpoint record %q of a pod that is gone", n.name, k)
				leaked[k] = true
			}
		}
		for k := range leaked {
			s.storeEvidence(n, k)
		}
		if len(leaked) > 0 {
			s.keepLogs(n)
		}
		// nftables: cnibox's sets and maps hold no address of a pod that is gone
		leaks, err := nftLeaks(fmt.Sprintf("/proc/%d/ns/net", n.init), addrs)
		if err != nil {
			s.breach("leak", "%s: nftables: %v", n.name, err)
		}
		for _, leak := range leaks {
			s.breach("leak", "%s: %s", n.name, leak)
		}
	}
	// the IPPools: every allocation names a pod that exists
	out, err := c.kubectl("get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json")
	if err != nil {
		s.breach("leak", "IPPools: %v", err)
		return
	}
	var pools struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct {
				Allocations map[string]struct{ PodRef string }
			}
		}
	}
	json.Unmarshal([]byte(out), &pools)
	for _, p := range pools.Items {
		for off, a := range p.Spec.Allocations {
			if !pods[a.PodRef] {
				s.breach("leak", "IPPool %s: allocation %s of %s, a pod that is gone", p.Metadata.Name, off, a.PodRef)
			}
		}
	}
	s.logf("leftovers: checked %d nodes against %d pods", len(c.nodes), len(pods))
}

// nftLeaks lists the addresses in the pod or secondary network that the
// elements (keys and map values) of cnibox's nftables sets and maps in
// the network namespace nsPath hold and no pod has. It reads them over
// netlink (Debian's nft aborts on the concatenated keys of the policy
// table). An address sits at a 4-byte boundary of a key or value (nft
// pads each field of a concatenation to 4 bytes).
func nftLeaks(nsPath string, addrs map[string]bool) ([]string, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, err
	}
	defer conn.CloseLasting()
	tables, err := conn.ListTables()
	if err != nil {
		return nil, err
	}
	secondary := netip.MustParsePrefix(wbRange)
	var leaks []string
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, "cnibox") {
			continue
		}
		sets, err := conn.GetSets(t)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", t.Name, err)
		}
		for _, set := range sets {
			elems, err := conn.GetSetElements(set)
			if err != nil {
				return nil, fmt.Errorf("set %s %s: %w", t.Name, set.Name, err)
			}
			for _, e := range elems {
				for _, b := range [][]byte{e.Key, e.Val} {
					for i := 0; i+4 <= len(b); i += 4 {
						a := netip.AddrFrom4([4]byte(b[i : i+4]))
						if !(clusterNet.Contains(a) || secondary.Contains(a)) || addrs[a.String()] || a.As4()[3] <= 1 {
							continue // a pod's, or a network's or gateway's
						}
						leaks = append(leaks, fmt.Sprintf("nftables %s %s: an element holds %s, no pod's", t.Name, set.Name, a))
					}
				}
			}
		}
	}
	return leaks, nil
}

// summary is the run's summary: faults by kind, pods churned, breaches by
// invariant, the longest unreachability after each kind of fault, the
// agents' RSS over time.
func (s *soak) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	elapsed := time.Since(s.start)
	fmt.Fprintf(&b, "seed %d, churn %v, %d nodes, run %v in all\n", s.seed, s.dur, len(s.c.nodes), elapsed.Round(time.Second))
	fmt.Fprintf(&b, "pods: %d created (%.2f/s over the churn, target %d/s), %d deleted by the churn, %d seen Running with an address\n",
		s.created, float64(s.created)/s.dur.Seconds(), targetRate, s.deleted, s.running)
	fmt.Fprintf(&b, "secondary network (%s, whereabouts): %d pods seen Running with its address\n", wbNAD, s.runningSecondary)
	b.WriteString("faults:")
	for _, k := range faultKinds {
		fmt.Fprintf(&b, " %s %d,", k, s.faults[k])
	}
	b.WriteString("\nbreaches:")
	total := 0
	for _, inv := range []string{"duplicate-address", "reach-new", "reach-after-fault", "policy", "leak", "recovery"} {
		fmt.Fprintf(&b, " %s %d,", inv, s.breaches[inv])
		total += s.breaches[inv]
	}
	fmt.Fprintf(&b, " total %d\n", total)
	b.WriteString("longest unreachability of a pod that had answered, by the fault before it:")
	kinds := append([]string{"none"}, faultKinds...)
	for _, k := range kinds {
		if d, ok := s.longest[k]; ok {
			fmt.Fprintf(&b, " %s %.1fs,", k, d.Seconds())
		} else if k != "none" {
			fmt.Fprintf(&b, " %s -,", k)
		}
	}
	b.WriteString("\nagents' RSS (MiB) at each minute, by node:\n")
	nodes := make([]string, 0, len(s.rss))
	for n := range s.rss {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		fmt.Fprintf(&b, "  %s:", n)
		last := -1
		maxKiB := 0
		for _, r := range s.rss[n] {
			maxKiB = max(maxKiB, r.kib)
			if m := int(r.at.Minutes()); m != last {
				last = m
				fmt.Fprintf(&b, " %dm %.0f", m, float64(r.kib)/1024)
			}
		}
		fmt.Fprintf(&b, " (max %.0f)\n", float64(maxKiB)/1024)
	}
	return b.String()
}

// storeEvidence logs what the node's store holds for the pod of a leaked
// record (key "network ifname ns/pod"): its reservations and endpoint
// records as cnibox inspect shows them, container ID and boot included.
func (s *soak) storeEvidence(n *node, key string) {
	f := strings.Fields(key)
	if len(f) < 3 {
		return
	}
	cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
	ids := map[string]bool{}
	for _, args := range [][]string{{"inspect", "ipam", "--json", "--conf-dir", n.hostDir("/etc/cni/net.d")}, {"inspect", "endpoints", "--json"}} {
		out, err := n.onNode(append([]string{cnibox}, args...)...)
		if err != nil {
			s.logf("%s: cnibox %s: %v", n.name, strings.Join(args[:2], " "), err)
			continue
		}
		var v any
		if json.Unmarshal([]byte(out), &v) != nil {
			continue
		}
		for _, m := range findObjects(v, f[2]) {
			b, _ := json.Marshal(m)
			s.logf("%s: cnibox %s: %s", n.name, strings.Join(args[:2], " "), b)
			if id, _ := m["containerID"].(string); id != "" && !ids[id] {
				ids[id] = true
			}
		}
	}
	// what the runtime did with that sandbox: whether it still has it,
	// and the lines of the kubelet's and containerd's logs that name it
	for id := range ids {
		out, err := n.onNode("ctr", "--address", filepath.Join(n.dir, "containerd.sock"), "-n", "k8s.io", "containers", "ls", "id=="+id)
		s.logf("%s: sandbox %s in containerd: %v %s", n.name, id, err, strings.TrimSpace(out))
		for _, name := range []string{"kubelet", "containerd"} {
			d, err := s.daemon(n, name)
			if err != nil || d.out == "" {
				continue
			}
			out, _ := n.onNode("sh", "-c", `grep -F "$0" "$1" | tail -n 8`, id[:12], d.out)
			s.logf("%s: %s's log on %s:\n%s", n.name, name, id[:12], out)
		}
	}
}

// keepLogs copies n's kubelet and containerd logs into the report
// directory (NODE-kubelet.log, NODE-containerd.log).
func (s *soak) keepLogs(n *node) {
	for _, name := range []string{"kubelet", "containerd"} {
		d, err := s.daemon(n, name)
		if err != nil || d.out == "" {
			continue
		}
		b, err := os.ReadFile(d.out)
		if err == nil {
			err = os.WriteFile(filepath.Join(s.report, n.name+"-"+name+".log"), b, 0o644)
		}
		s.logf("%s: %s's log (%s) kept in %s: %v", n.name, name, d.out, s.report, err)
	}
}

// findObjects returns the JSON objects in v that have a string field
// holding want (or ending in it, for "ns/name" against a name).
func findObjects(v any, want string) []map[string]any {
	var out []map[string]any
	switch t := v.(type) {
	case []any:
		for _, x := range t {
			out = append(out, findObjects(x, want)...)
		}
	case map[string]any:
		hit := false
		for _, x := range t {
			switch y := x.(type) {
			case string:
				if y == want || strings.HasSuffix(want, "/"+y) && strings.Contains(want, "/") {
					hit = true
				}
			default:
				out = append(out, findObjects(y, want)...)
			}
		}
		if hit {
			out = append(out, t)
		}
	}
	return out
}
