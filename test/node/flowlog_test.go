//go:build kube

package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestKubeNodeFlowLog is the flow log as a user sets it up from the
// README (cnibox's manifest on two nodes, docs/flowlog.md): a namespace
// annotated cnibox.io/flow-log: allow,deny, a NetworkPolicy that lets
// anyone reach its server on TCP 80; a client on the other node is
// refused on 81 and served on 80; `cnibox flows` in the server node's
// agent pod shows the denial (the policy isolating the server) and the
// allowance (the policy and its rule), with both pods named and the
// kernel's time of the attempt; a namespace without the annotation logs
// nothing; a StagedNetworkPolicy (its CRDs applied before the agents
// start) that would refuse a working connection leaves it working and
// logs it as staged-deny with its name; a flood of 10,000 denied SYNs a
// second from one pod with the agent killed in the middle (floodStep);
// after it, both connections are logged again.
func TestKubeNodeFlowLog(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	d := deploymentOf(t, env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)"))
	c := startCluster(t, 2)
	c.importImages(imageTar)
	n1, n2 := c.nodes[0], c.nodes[1]
	crds, err := os.ReadFile("../../deploy/kubernetes/staged-policies-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.kubectlIn(string(crds), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply -f staged-policies-crds.yaml: %v\n%s", err, out)
	}
	c.crdEstablished("stagednetworkpolicies.cnibox.io")
	// The log rotates every MiB and keeps 50 files, for the flood's tail.
	manifest := withAgentEnv(t, d.yaml, "FLANNELD_FLOW_LOG_MAX_SIZE", strconv.Itoa(floodMaxSize), "FLANNELD_FLOW_LOG_MAX_FILES", strconv.Itoa(floodMaxFiles),
		"FLANNELD_FLOW_LOG_RATE", strconv.Itoa(floodLogRate))
	if out, err := c.kubectlIn(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply -f the manifest: %v\n%s", err, out)
	}
	c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
	c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())

	for _, ns := range []struct{ name, log string }{{"fl", "allow,deny"}, {"quiet", ""}, {"stage", ""}} {
		o := corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: map[string]string{"app": "flowlog-test"}}}
		if ns.log != "" {
			o.Annotations = map[string]string{"cnibox.io/flow-log": ns.log}
		}
		b, _ := json.Marshal(o)
		c.apply(string(b))
		policy := `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"namespace":%q,"name":"web"},
			"spec":{"podSelector":{"matchLabels":{"app":"srv"}},"ingress":[{"ports":[{"protocol":"TCP","port":80}]}]}}`
		if ns.name == "stage" { // no NetworkPolicy; a staged one that would let nothing in
			policy = `{"apiVersion":"cnibox.io/v1alpha1","kind":"StagedNetworkPolicy","metadata":{"namespace":%q,"name":"lockdown"},
			"spec":{"podSelector":{"matchLabels":{"app":"srv"}},"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"nobody"}}}]}]}}`
		}
		c.apply(fmt.Sprintf(policy, ns.name))
		c.apply(flowPod(ns.name, "srv", n1.name, "mkdir -p /tmp && echo hi > /tmp/index.html && httpd -p 80 -h /tmp && httpd -p 81 -h /tmp && exec sleep 86400"))
		c.apply(flowPod(ns.name, "cli", n2.name, "exec sleep 86400"))
		c.must("-n", ns.name, "wait", "--for=condition=Ready", "pod/srv", "pod/cli", c.timeout())
	}
	c.apply(flowPod("fl", "flood", n2.name, "mkdir -p /tmp && exec sleep 86400"))
	c.must("-n", "fl", "wait", "--for=condition=Ready", "pod/flood", c.timeout())
	agent := strings.TrimSpace(c.must("-n", "kube-system", "get", "pods", "-l", "app=cnibox",
		"--field-selector", "spec.nodeName="+n1.name, "-o", "jsonpath={.items[0].metadata.name}"))
	get := func(ns, port string) (time.Time, error) {
		ip := strings.TrimSpace(c.must("-n", ns, "get", "pod", "srv", "-o", "jsonpath={.status.podIP}"))
		at := time.Now()
		// busybox nc, not wget: the static busybox's wget looks the
		// service up through NSS, which a static binary cannot load.
		out, err := c.kubectl("-n", ns, "exec", "cli", "--", "sh", "-c",
			`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 `+ip+" "+port)
		if err == nil && !strings.Contains(out, "hi") {
			err = fmt.Errorf("no page from %s:%s: %q", ip, port, out)
		}
		return at, err
	}
	// flows reads node-1's flow log in its agent pod, as an operator would
	// (an error until the agent has written its first record: the file is
	// made then).
	flows := func(args ...string) ([]flowlog.Record, error) {
		out, err := c.kubectl(append([]string{"-n", "kube-system", "exec", agent, "-c", "agent", "--", "/usr/local/bin/cnibox", "flows", "--json"}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("cnibox flows: %v: %s", err, out)
		}
		var recs []flowlog.Record
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var r flowlog.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("cnibox flows --json printed %q: %v", sc.Text(), err)
			}
			recs = append(recs, r)
		}
		return recs, nil
	}
	mustFlows := func(args ...string) []flowlog.Record {
		recs, err := flows(args...)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	find := func(what string, at time.Time, match func(flowlog.Record) bool) flowlog.Record {
		var found flowlog.Record
		c.poll(what+" in node-1's flow log", func() error {
			recs, err := flows("--namespace", "fl")
			if err != nil {
				return err
			}
			for _, r := range recs {
				if match(r) {
					found = r
					return nil
				}
			}
			return fmt.Errorf("not there")
		})
		if d := found.Time.Sub(at); d < -time.Second || d > 5*time.Second {
			t.Errorf("%s: logged at %s, the attempt was at %s: the record's time is the kernel's verdict, within 5 s of it", what, found.Time, at)
		}
		return found
	}

	step(t, "a refused connection is logged as denied with the isolating policy", func() {
		at, err := get("fl", "81")
		if err == nil {
			t.Fatal("fl/cli reaches fl/srv:81, which only 80 is open on")
		}
		r := find("fl/cli -> fl/srv:81 denied", at, func(r flowlog.Record) bool { return r.Verdict == flowlog.Deny && r.Dst.Port == 81 })
		want := flowlog.Policy{Kind: "NetworkPolicy", Namespace: "fl", Name: "web", Rule: "isolation", Isolating: []string{"web"}}
		if r.Policy == nil || fmt.Sprint(*r.Policy) != fmt.Sprint(want) || r.Src.Pod != "cli" || r.Dst.Pod != "srv" ||
			r.Direction != flowlog.Ingress || r.Proto != "TCP" || r.Node != n1.name {
			t.Errorf("record %+v (policy %+v), want ingress TCP from fl/cli to fl/srv on %s decided by %+v", r, r.Policy, n1.name, want)
		}
	})
	step(t, "an allowed connection is logged with the allowing policy and rule", func() {
		at, err := get("fl", "80")
		if err != nil {
			t.Fatalf("fl/cli cannot reach fl/srv:80: %v", err)
		}
		r := find("fl/cli -> fl/srv:80 allowed", at, func(r flowlog.Record) bool { return r.Verdict == flowlog.Allow && r.Dst.Port == 80 })
		if r.Policy == nil || r.Policy.Name != "web" || r.Policy.Rule != "0" || r.Src.Namespace != "fl" {
			t.Errorf("record %+v (policy %+v), want np fl/web rule 0", r, r.Policy)
		}
	})
	step(t, "a namespace without the annotation logs nothing", func() {
		if _, err := get("quiet", "81"); err == nil {
			t.Fatal("quiet/cli reaches quiet/srv:81")
		}
		if _, err := get("quiet", "80"); err != nil {
			t.Fatalf("quiet/cli cannot reach quiet/srv:80: %v", err)
		}
		// fl's denial, attempted after quiet's, is logged: by then
		// quiet's would have been too.
		at, _ := get("fl", "81")
		find("fl's second denial", at, func(r flowlog.Record) bool { return r.Verdict == flowlog.Deny && r.Time.After(at.Add(-time.Second)) })
		if recs := mustFlows("--namespace", "quiet"); len(recs) > 0 {
			t.Errorf("namespace quiet has no annotation, yet its flows were logged: %+v", recs)
		}
	})
	step(t, "a staged policy that would refuse a working connection: it works, logged as staged-deny", func() {
		at, err := get("stage", "80")
		if err != nil {
			t.Fatalf("stage/cli cannot reach stage/srv:80, which only a staged policy would refuse: %v", err)
		}
		var found flowlog.Record
		c.poll("stage/cli -> stage/srv:80 staged-deny in node-1's flow log", func() error {
			recs, err := flows("--namespace", "stage", "--verdict", "staged-deny")
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Dst.Port == 80 && !r.Time.Before(at.Add(-time.Second)) {
					found = r
					return nil
				}
			}
			return fmt.Errorf("not there")
		})
		want := flowlog.Policy{Kind: "StagedNetworkPolicy", Namespace: "stage", Name: "lockdown", Rule: "isolation", Isolating: []string{"lockdown"}}
		if found.Policy == nil || fmt.Sprint(*found.Policy) != fmt.Sprint(want) || found.Src.Pod != "cli" || found.Dst.Pod != "srv" {
			t.Errorf("record %+v (policy %+v), want stage/cli -> stage/srv decided by %+v", found, found.Policy, want)
		}
		for _, r := range mustFlows("--namespace", "stage") {
			if r.Verdict == flowlog.Allow || r.Verdict == flowlog.Deny {
				t.Errorf("namespace stage logs nothing but what its staged policy would change, yet: %+v", r)
			}
		}
	})
	step(t, "twenty new pods open from their first packet: none dropped pending, ADD to first allowed packet", func() {
		// Each new pod is selected by web (ingress-isolated) and connects
		// out the moment its container starts. Before a new pod's
		// admission its traffic met the pending drop until the agent saw
		// its status (docs/policy.md); the pending rule's counter must not
		// move, and each pod's first allowed connection, as the flow log
		// has it, follows its ADD by no more than the container's start.
		srv := strings.TrimSpace(c.must("-n", "fl", "get", "pod", "srv", "-o", "jsonpath={.status.podIP}"))
		pending := func() uint64 {
			// (read with netops, not Debian's nft 1.0.6, which aborts on
			// the table's concatenations)
			h, err := netops.Open(fmt.Sprintf("/proc/%d/ns/net", n1.init))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			cs, err := h.NFT().PolicyCounters()
			c, ok := cs["c-"+nft.PolicyPending]
			if err != nil || !ok {
				t.Fatalf("the pending counter: %v (counters %v)", err, cs)
			}
			return c.Packets
		}
		before := pending()
		const n = 20
		var names []string
		for i := range n {
			name := fmt.Sprintf("new-%d", i)
			names = append(names, "pod/"+name)
			c.apply(busyboxPod("fl", name, n1.name, map[string]string{"app": "srv", "new": "yes"}, nil, "sh", "-c",
				"until nc -w 2 "+srv+" 80 </dev/null >/dev/null; do :; done; exec sleep 86400"))
		}
		c.must(append([]string{"-n", "fl", "wait", "--for=condition=Ready", c.timeout()}, names...)...)
		var took []time.Duration
		for i := range n {
			name := fmt.Sprintf("new-%d", i)
			out := c.must("-n", "kube-system", "exec", agent, "-c", "agent", "--", "/usr/local/bin/cnibox", "inspect", "endpoints", "--pod", "fl/"+name, "--json")
			var eps []struct{ Created time.Time }
			if err := json.Unmarshal([]byte(out), &eps); err != nil || len(eps) != 1 {
				t.Fatalf("cnibox inspect endpoints --pod fl/%s: %v %s", name, err, out)
			}
			var first flowlog.Record
			c.poll(name+"'s first allowed connection in node-1's flow log", func() error {
				recs, err := flows("--namespace", "fl")
				if err != nil {
					return err
				}
				for _, r := range recs {
					if r.Verdict == flowlog.Allow && r.Src.Pod == name && r.Dst.Port == 80 {
						first = r
						return nil
					}
				}
				return fmt.Errorf("not there")
			})
			took = append(took, first.Time.Sub(eps[0].Created))
		}
		if after := pending(); after != before {
			t.Errorf("the pending drop counted %d packets while %d new pods started (%d before, %d after)", after-before, n, before, after)
		}
		slices.Sort(took)
		t.Logf("from a new pod's ADD (its endpoint record) to its first allowed connection (the flow log), %d pods: p50 %v, p99 %v (the container's start included)",
			n, took[n/2].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
		c.must("-n", "fl", "delete", "pod", "-l", "new=yes", "--wait=false")
	})
	step(t, "a flood of denied SYNs from one pod, its node's agent killed in the middle", func() {
		ip := func(pod string) string {
			return strings.TrimSpace(c.must("-n", "fl", "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
		}
		floodStep(t, c, n1, ip("srv"), ip("flood"))
	})
	step(t, "after the flood and the restart: served on 80, refused on 81, both logged", func() {
		at, err := get("fl", "80")
		if err != nil {
			t.Fatalf("fl/cli cannot reach fl/srv:80 after the flood: %v", err)
		}
		find("fl/cli -> fl/srv:80 allowed after the restart", at, func(r flowlog.Record) bool {
			return r.Verdict == flowlog.Allow && r.Src.Pod == "cli" && !r.Time.Before(at.Add(-time.Second))
		})
		if at, err = get("fl", "81"); err == nil {
			t.Fatal("fl/cli reaches fl/srv:81 after the flood")
		}
		find("fl/cli -> fl/srv:81 denied after the restart", at, func(r flowlog.Record) bool {
			return r.Verdict == flowlog.Deny && r.Src.Pod == "cli" && !r.Time.Before(at.Add(-time.Second))
		})
	})
}

// flowPod is a busybox pod ns/name (label app=name) on node running sh -c
// script.
func flowPod(ns, name, node, script string) string {
	return busyboxPod(ns, name, node, map[string]string{"app": name}, nil, "sh", "-c", script)
}
