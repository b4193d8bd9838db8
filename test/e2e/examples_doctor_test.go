package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// exampleCase is an example TestExamplesPassDoctor runs and what doctor
// must say of it: a pass line with each of want's words.
type exampleCase struct {
	file string
	want []string
}

// TestExamplesPassDoctor: every example this node can run (those that need
// no agent, DHCP server, Kubernetes API or cloud metadata) passes `cnibox
// doctor` after an ADD, with what its chained roles do on purpose: sbr's
// default route in table 100, vrf's routes in the VRF's table, tuning's MTU
// that differs from the host veth. The node's eth1 and eth2 (the examples'
// masters and host device) are veths of the test's node namespace, their
// peers in a LAN namespace; an example whose ADD says the kernel lacks a
// feature is skipped with that message.
func TestExamplesPassDoctor(t *testing.T) {
	e := newEnv(t)
	h := hostHandle(t)
	lan := nstest.NewNS(t, "lan")
	l, err := netops.Open(lan)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	for _, name := range []string{"eth1", "eth2"} {
		if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: name, PeerName: name, Peer: l}); err != nil {
			t.Fatal(err)
		}
		must(t, h.SetLinkUp(name))
		must(t, l.SetLinkUp(name))
		t.Cleanup(func() { h.DeleteLink(name) })
	}
	// What the example's roles do on purpose, as doctor must say it.
	cases := []exampleCase{
		{"10-bridge.conflist", nil},
		{"20-dualstack.conflist", nil},
		{"30-static.conflist", nil},
		{"41-ptp.conflist", nil},
		{"42-macvlan.conflist", nil},
		{"43-ipvlan.conflist", nil},
		{"44-vlan.conflist", []string{"tags VLAN"}},
		{"45-dummy.conflist", nil},
		{"46-host-device.conflist", nil},
		{"47-tap.conflist", nil},
		{"48-firewall.conflist", nil},
		{"49-sbr.conflist", []string{"lookup 100", "(table 100)"}},
		{"51-vrf.conflist", []string{"VRF"}},
		{"60-multi.conflist", nil},
		{"85-portmap.conflist", nil},
		{"90-tuning-bandwidth.conflist", []string{"tuning set eth0's mtu to 1450", "set by tuning on purpose"}},
	}
	// The examples this test does not run, and why: every other file of
	// examples/ must be a case above (a new example is run or named here).
	notHere := map[string]string{
		"40-loopback.conf":                "the pod's lo only: no endpoint record for doctor",
		"50-flannel.conflist":             "needs flanneld's or the agent's subnet.env",
		"52-dhcp-macvlan.conflist":        "needs a DHCP server and cnibox-dhcp",
		"53-whereabouts-macvlan.conflist": "needs cnibox-agent's cluster IPAM",
		"61-multi-k8s.conflist":           "needs the Kubernetes API through cnibox-agent",
		"70-vxlan.conflist":               "needs cnibox-agent's overlay",
		"74-azure-transparent.conflist":   "needs Azure's host agent (azure-vnet-ipam)",
		"75-azure.conflist":               "needs Azure's host agent (azure-vnet-ipam)",
		"76-aws.conflist":                 "needs the EC2 metadata service",
		"77-file-pools.conflist":          "needs /etc/cnibox/pools.json, outside the test's files",
	}
	all, err := filepath.Glob(repoFile("examples", "*"))
	must(t, err)
	for _, f := range all {
		name := filepath.Base(f)
		if _, ok := notHere[name]; !ok && !slices.ContainsFunc(cases, func(c exampleCase) bool { return c.file == name }) {
			t.Errorf("examples/%s is neither run here nor named in notHere with the reason", name)
		}
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.file, ".conflist"), func(t *testing.T) {
			e := e.withT(t)
			b, err := os.ReadFile(repoFile("examples", tc.file))
			must(t, err)
			conf := e.confDir(map[string]string{tc.file: string(b)})
			l := loadList(t, filepath.Join(conf, tc.file))
			name := "ex" + tc.file[:2]
			p := e.newPod(name)
			if _, err := e.cni.AddNetworkList(context.Background(), l, p.rt); err != nil {
				if strings.Contains(err.Error(), "the node's kernel has no") {
					e.del(l, p) // as a runtime does after a failed ADD
					t.Skipf("this kernel cannot run %s: %v", tc.file, err)
				}
				t.Fatalf("ADD %s: %v", tc.file, err)
			}
			deleted := false
			defer func() {
				if !deleted {
					e.del(l, p)
				}
			}()
			var rs []doctorResult
			out, errs, code := e.cliRun("doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--pod", "default/"+name, "--json")
			if err := json.Unmarshal([]byte(out), &rs); err != nil {
				t.Fatalf("doctor --json: %v\n%s\n%s", err, out, errs)
			}
			for _, r := range rs {
				if r.Status == "fail" {
					t.Errorf("doctor fails %s after its ADD: %s %s: %s (fix: %s)", tc.file, r.Subject, r.Check, r.Detail, r.Fix)
				}
			}
			if code != 0 && !t.Failed() {
				t.Errorf("doctor exit %d without a failed check\n%s", code, errs)
			}
			for _, w := range tc.want {
				found := false
				for _, r := range rs {
					found = found || (r.Status == "pass" && strings.Contains(r.Detail, w))
				}
				if !found {
					t.Errorf("doctor says nothing of %q for %s: %+v", w, tc.file, rs)
				}
			}
			// The DEL leaves nothing for doctor or gc to find.
			e.del(l, p)
			deleted = true
			var eps []json.RawMessage
			e.cliJSON(&eps, 0, "inspect", "endpoints", "--pod", "default/"+name)
			if len(eps) != 0 {
				t.Errorf("endpoint records of %s after its DEL: %s", tc.file, eps)
			}
		})
	}
}
