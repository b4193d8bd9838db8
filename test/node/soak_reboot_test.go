//go:build kube

package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSoakReboot is the soak's reboot alone, on one node, with the pods
// it lost records of (seeds 11 and 19): pods deleted just before the
// node's power cycle, pods deleted while it is down and pods deleted after
// it. Once the kubelet has collected their old sandboxes, the node's store
// holds records of the pods that exist and no other (docs/reliability.md,
// section Reboots). Run with make soak-reboot.
func TestSoakReboot(t *testing.T) {
	if os.Getenv("CNIBOX_CONFORMANCE_TOOLS") == "" {
		t.Skip("$CNIBOX_CONFORMANCE_TOOLS is not set: run it with make soak-reboot")
	}
	s := startSoak(t, 1, 1, 0, t.TempDir())
	c := s.c
	n := c.nodes[0]

	// before: deleted just ahead of the power cycle; during: deleted while
	// the node is down; after: once it is back; kept: never deleted.
	groups := map[string][]string{}
	var batch []string
	for i, g := range []string{"before", "during", "after", "kept"} {
		for j := range 3 {
			name := fmt.Sprintf("%s-%d", g, j)
			ns := soakNS
			if j == 1 {
				ns = soakPolicyNS
			}
			var ann map[string]string
			if j == 2 {
				ann = map[string]string{"k8s.v1.cni.cncf.io/networks": wbNAD}
			}
			hostPort := 0
			if j == 0 {
				hostPort = 21000 + i
			}
			batch = append(batch, s.podJSON(ns, name, n.name, map[string]string{"soak": "churn"}, ann, nil, hostPort))
			groups[g] = append(groups[g], ns+"/"+name)
		}
	}
	step(t, "twelve pods", func() {
		if _, err := c.kubectlIn(`{"apiVersion":"v1","kind":"List","items":[`+strings.Join(batch, ",")+`]}`, "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			for _, nn := range g {
				ns, name, _ := strings.Cut(nn, "/")
				c.must("-n", ns, "wait", "--for=condition=Ready", "pod/"+name, c.timeout())
			}
		}
	})
	del := func(g string) {
		for _, nn := range groups[g] {
			ns, name, _ := strings.Cut(nn, "/")
			c.must("-n", ns, "delete", "pod", "--wait=false", name)
		}
	}
	step(t, "delete the before pods, reboot the node, delete the during pods while it is down", func() {
		del("before")
		time.Sleep(time.Second) // the kubelet has begun to stop them
		done := make(chan error, 1)
		go func() { done <- s.reboot(n) }()
		time.Sleep(3 * time.Second) // the kubelet is gone: the pods wait for it
		del("during")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	// The first ADD of the new boot (the kept pods' new sandboxes)
	// releases every record of the earlier boot, whose namespaces the
	// power cycle took: the kubelet's GC, which stops the dead sandboxes a
	// minute or two later, must find nothing left to free.
	step(t, "the new boot's first ADDs release the earlier boot's records", func() {
		for _, nn := range groups["kept"] {
			ns, name, _ := strings.Cut(nn, "/")
			c.must("-n", ns, "wait", "--for=condition=Ready", "pod/"+name, c.timeout())
		}
		if old := earlierBootRecords(t, n); len(old) > 0 {
			for _, k := range old {
				s.storeEvidence(n, k)
			}
			cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
			for _, cmd := range [][]string{{"cat", "/proc/sys/kernel/random/boot_id"}, {cnibox, "store", "check", "--json"},
				{"sh", "-c", "ls -la /var/run/netns/; grep -h 'cnibox host-local' " + filepath.Join(n.dir, "containerd.log")}} {
				out, err := n.onNode(cmd...)
				t.Logf("%v: %v\n%s", cmd, err, out)
			}
			t.Errorf("records of the earlier boot after the new boot's first ADDs: %v", old)
		}
	})
	step(t, "delete the after pods", func() { del("after") })
	step(t, "every record names a pod that exists", func() {
		deadline := time.Now().Add(6 * time.Minute)
		for {
			gone := leftoverRecords(t, s)
			if len(gone) == 0 {
				return
			}
			if time.Now().After(deadline) {
				for _, k := range gone {
					s.storeEvidence(n, strings.TrimPrefix(k, n.name+": "))
				}
				for _, name := range []string{"kubelet", "containerd"} {
					if dp, err := s.daemon(n, name); err == nil {
						out, _ := n.onNode("grep", "-E", "TearDown|destroy network|StopPodSandbox", dp.out)
						t.Logf("%s (%s):\n%s", name, dp.out, out)
					}
				}
				t.Fatalf("records of pods that are gone: %v", gone)
			}
			time.Sleep(5 * time.Second)
		}
	})
}

// earlierBootRecords lists the reservations of an earlier boot in n's
// store ("network ifname ns/pod"), as cnibox inspect ipam shows them.
func earlierBootRecords(t *testing.T, n *node) []string {
	var old []string
	for _, p := range inspectIPAM(t, n) {
		for _, r := range p.Reservations {
			if r.EarlierBoot {
				old = append(old, p.Network+" "+r.IfName+" "+r.Pod)
			}
		}
	}
	return old
}

// leftoverRecords lists the store records (reservations and endpoint
// records, "network ifname ns/pod") on s's nodes whose pod does not exist.
func leftoverRecords(t *testing.T, s *soak) []string {
	pods := map[string]bool{}
	for _, ns := range []string{soakNS, soakPolicyNS} {
		out := s.c.must("-n", ns, "get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}")
		for _, name := range strings.Fields(out) {
			pods[ns+"/"+name] = true
		}
	}
	var gone []string
	for _, n := range s.c.nodes {
		reserved, endpoints := nodeState(t, n)
		for _, m := range []map[string]bool{reserved, endpoints} {
			for k := range m {
				f := strings.Fields(k)
				if len(f) == 3 && (strings.HasPrefix(f[2], soakNS+"/") || strings.HasPrefix(f[2], soakPolicyNS+"/")) && !pods[f[2]] {
					gone = append(gone, n.name+": "+k)
				}
			}
		}
	}
	return gone
}
