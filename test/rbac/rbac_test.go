//go:build kube

package rbac

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/test/kube"
)

// cluster is a control plane with the manifests applied.
type cluster struct {
	t          *testing.T
	kubectl    string
	kubeconfig string
}

// kubeBin is the directory of the Kubernetes binaries: $CNIBOX_KUBE_BIN,
// else control-plane.sh's cache.
func kubeBin(t *testing.T) string {
	d := os.Getenv("CNIBOX_KUBE_BIN")
	if d == "" {
		home, _ := os.UserHomeDir()
		d = filepath.Join(home, ".cache", "cnibox-kube", "v1.34.2")
	}
	for _, b := range []string{"kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(d, b)); err != nil {
			t.Fatalf("%v: build it with test/kube/control-plane.sh build kubectl", err)
		}
	}
	return d
}

// start runs the control plane and applies the CRDs and both agents'
// manifests (the RBAC and the policy; their DaemonSets never run: no node
// has a kubelet).
func start(t *testing.T) *cluster {
	bin := kubeBin(t)
	kc := kube.Start(t, []string{"KCP_CACHE=" + bin})
	c := &cluster{t: t, kubectl: filepath.Join(bin, "kubectl"), kubeconfig: kc}
	for _, f := range []string{"nad-crd.yaml", "whereabouts-crds.yaml", "egressgateway-crd.yaml", "loadbalancerippool-crd.yaml", "cnibox.yaml", "cnibox-multus.yaml"} {
		c.must("apply", "-f", "../../deploy/kubernetes/"+f)
	}
	return c
}

// run runs kubectl as the admin, or with token when given; it returns the
// combined output and whether kubectl succeeded.
func (c *cluster) run(token string, args ...string) (string, bool) {
	args = append([]string{"--kubeconfig=" + c.kubeconfig}, args...)
	if token != "" {
		args = append(args, "--token="+token)
	}
	var out bytes.Buffer
	cmd := exec.Command(c.kubectl, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err == nil
}

// must runs kubectl as the admin and fails the test if it fails.
func (c *cluster) must(args ...string) string {
	c.t.Helper()
	out, ok := c.run("", args...)
	if !ok {
		c.t.Fatalf("kubectl %v: %s", args, out)
	}
	return out
}

// create creates the objects of a YAML document as the admin.
func (c *cluster) create(doc string) {
	c.t.Helper()
	f := filepath.Join(c.t.TempDir(), "obj.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		c.t.Fatal(err)
	}
	// apply, not create: kube-controller-manager's service account
	// controller may have made the default namespace's "default" first
	// (a race the test lost now and then).
	c.must("apply", "--server-side", "--force-conflicts", "-f", f)
}

// canI is kubectl auth can-i as the service account sa of kube-system.
func (c *cluster) canI(sa string, args ...string) bool {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.kubectl, append([]string{"--kubeconfig=" + c.kubeconfig, "auth", "can-i", "--as=system:serviceaccount:kube-system:" + sa}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := strings.TrimSpace(stdout.String())
	if out != "yes" && out != "no" {
		c.t.Fatalf("kubectl auth can-i %v: %s %s", args, out, stderr.String())
	}
	return err == nil && out == "yes"
}

// patch sends a PATCH of the API path with the token, as the agent does
// (kubectl patch reads the object first, which the agent's role does not
// allow for nodes/status); it returns whether the API server took it and
// its answer.
func (c *cluster) patch(token, path, patchType, body string) (bool, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPatch, "https://127.0.0.1:16443"+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", patchType)
	// control-plane.sh's API server has a self-signed certificate
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(b)
}

// objects are two nodes, an agent pod of each service account on node-a,
// and a pod on each node.
const objects = `
apiVersion: v1
kind: Node
metadata: {name: node-a}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {team: b}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: default}
---
apiVersion: v1
kind: Pod
metadata: {name: agent-a, namespace: kube-system}
spec: {nodeName: node-a, serviceAccountName: cnibox, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: multus-a, namespace: kube-system}
spec: {nodeName: node-a, serviceAccountName: cnibox-multus, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: mine, namespace: default, labels: {app: web}, annotations: {keep: me}}
spec: {nodeName: node-a, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: theirs, namespace: default}
spec: {nodeName: node-b, containers: [{name: c, image: x}]}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: kube-scheduler, namespace: kube-system}
spec: {holderIdentity: scheduler}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: node-a, namespace: kube-node-lease}
spec: {holderIdentity: node-a}
`

// TestKubeRBAC: each agent's service account may make every call its
// features make (the table in docs/security.md) and not the ones a stolen
// token would want: other namespaces' and other names' Leases, node
// patches, secrets, pods it does not need.
func TestKubeRBAC(t *testing.T) {
	c := start(t)
	type check struct {
		sa   string
		args []string
		want bool
	}
	var checks []check
	add := func(sa string, want bool, lines ...string) {
		for _, l := range lines {
			checks = append(checks, check{sa, strings.Fields(l), want})
		}
	}
	ipam := []string{ // the cluster IPAM, both agents
		"list pods --all-namespaces", "watch pods --all-namespaces",
		"get ippools.whereabouts.cni.cncf.io -n kube-system", "list ippools.whereabouts.cni.cncf.io -n kube-system",
		"watch ippools.whereabouts.cni.cncf.io -n kube-system", "create ippools.whereabouts.cni.cncf.io -n kube-system",
		"update ippools.whereabouts.cni.cncf.io -n kube-system",
		"get overlappingrangeipreservations.whereabouts.cni.cncf.io -n kube-system",
		"list overlappingrangeipreservations.whereabouts.cni.cncf.io -n kube-system",
		"create overlappingrangeipreservations.whereabouts.cni.cncf.io -n kube-system",
		"delete overlappingrangeipreservations.whereabouts.cni.cncf.io -n kube-system",
		"get nodeslicepools.whereabouts.cni.cncf.io -n kube-system", "list nodeslicepools.whereabouts.cni.cncf.io -n kube-system",
		"create nodeslicepools.whereabouts.cni.cncf.io -n kube-system", "update nodeslicepools.whereabouts.cni.cncf.io -n kube-system",
		"get leases/cnibox-whereabouts-reclaim -n kube-system", "update leases/cnibox-whereabouts-reclaim -n kube-system",
		"create leases -n kube-system",
	}
	podAPI := []string{ // the pod API, both agents
		"get pods -n default", "list pods --all-namespaces", "watch pods --all-namespaces", "patch pods -n default",
		"get network-attachment-definitions.k8s.cni.cncf.io -n default", "create events -n default",
	}
	never := []string{ // what neither may do
		"get leases/kube-scheduler -n kube-system", "update leases/kube-scheduler -n kube-system",
		"get leases/kube-controller-manager -n kube-system", "update leases/kube-controller-manager -n kube-system",
		"list leases -n kube-system", "delete leases/cnibox-whereabouts-reclaim -n kube-system",
		"get leases/node-a -n kube-node-lease", "update leases/node-a -n kube-node-lease", "create leases -n kube-node-lease",
		"create leases -n default", "get leases/cnibox-whereabouts-reclaim -n default",
		"patch nodes", "update nodes", "delete nodes", "create nodes", "update nodes --subresource=status",
		"get secrets -n kube-system", "list secrets --all-namespaces", "get configmaps -n kube-system",
		"create pods -n default", "delete pods -n default", "update pods -n default", "patch pods --subresource=status -n default",
		"create pods --subresource=eviction -n default", "create serviceaccounts --subresource=token -n kube-system",
		"list network-attachment-definitions.k8s.cni.cncf.io -n default", "create network-attachment-definitions.k8s.cni.cncf.io -n default",
		"delete ippools.whereabouts.cni.cncf.io -n kube-system", "create ippools.whereabouts.cni.cncf.io -n default",
		"list ippools.whereabouts.cni.cncf.io -n default", "update overlappingrangeipreservations.whereabouts.cni.cncf.io -n kube-system",
		"delete nodeslicepools.whereabouts.cni.cncf.io -n kube-system",
		"patch events -n default", "delete events -n default",
		"create validatingadmissionpolicies.admissionregistration.k8s.io", "delete validatingadmissionpolicybindings.admissionregistration.k8s.io",
		"escalate clusterroles", "bind clusterroles", "impersonate serviceaccounts",
	}
	egress := []string{ // egress gateways, cnibox.yaml's agent only
		"list egressgateways.cnibox.io", "watch egressgateways.cnibox.io", "patch egressgateways.cnibox.io --subresource=status",
		"list leases -n cnibox-egress", "watch leases -n cnibox-egress", "create leases -n cnibox-egress", "update leases -n cnibox-egress",
	}
	never = append(never, "delete leases -n cnibox-egress", "create egressgateways.cnibox.io", "update egressgateways.cnibox.io",
		"delete egressgateways.cnibox.io", "patch egressgateways.cnibox.io", "get secrets -n cnibox-egress")
	// cnibox.yaml: the overlay, the pod API, the cluster IPAM, egress
	add("cnibox", true, "get nodes", "list nodes", "watch nodes", "patch nodes --subresource=status")
	add("cnibox", true, egress...)
	add("cnibox", true, podAPI...)
	add("cnibox", true, ipam...)
	add("cnibox", false, never...)
	// cnibox-multus.yaml: the pod API and the cluster IPAM, nothing on nodes
	add("cnibox-multus", true, podAPI...)
	add("cnibox-multus", true, ipam...)
	add("cnibox-multus", false, never...)
	add("cnibox-multus", false, "get nodes", "list nodes", "patch nodes --subresource=status")
	add("cnibox-multus", false, egress...)
	for _, ck := range checks {
		if got := c.canI(ck.sa, ck.args...); got != ck.want {
			t.Errorf("kubectl auth can-i %s --as=system:serviceaccount:kube-system:%s: %v, want %v", strings.Join(ck.args, " "), ck.sa, got, ck.want)
		}
	}
}

// TestKubeAdmissionPolicy: with a token bound to the agent pod on node-a,
// as the kubelet gives it, the agent writes the network-status annotation
// of node-a's pods, its node's status and its Lease, and nothing else the
// RBAC would allow: another node's pods or status, a pod's labels,
// annotations or finalizers, another Lease. A token bound to no pod (no
// node) writes no pod.
func TestKubeAdmissionPolicy(t *testing.T) {
	c := start(t)
	c.create(objects)
	for _, sa := range []struct{ name, pod string }{{"cnibox", "agent-a"}, {"cnibox-multus", "multus-a"}} {
		t.Run(sa.name, func(t *testing.T) {
			token := c.must("create", "token", sa.name, "-n", "kube-system", "--bound-object-kind=Pod", "--bound-object-name="+sa.pod)
			who := c.must("auth", "whoami", "-o", "json", "--token="+token)
			var review struct {
				Status struct {
					UserInfo struct {
						Username string
						Extra    map[string][]string
					} `json:"userInfo"`
				}
			}
			if err := json.Unmarshal([]byte(who), &review); err != nil {
				t.Fatalf("kubectl auth whoami: %v\n%s", err, who)
			}
			if node := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(node) != 1 || node[0] != "node-a" {
				t.Fatalf("the bound token's user %+v has no node-name node-a: the policy has nothing to go by", review.Status.UserInfo)
			}
			status := func(v string) string {
				return `{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/network-status":` + jsonString(v) + `}}}`
			}
			// The policy takes a moment to be in force after it is
			// created: wait until it denies what it must deny (a server-side
			// dry run: admission runs, nothing is written before then).
			deadline := time.Now().Add(time.Minute)
			for {
				out, ok := c.run(token, "patch", "pod", "theirs", "-n", "default", "--dry-run=server", "--type=merge", "-p", status("[]"))
				if !ok && strings.Contains(out, "ValidatingAdmissionPolicy") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the agent of node-a still writes a pod of node-b a minute after the policy was created: %v %s", ok, out)
				}
				time.Sleep(200 * time.Millisecond)
			}
			for _, tc := range []struct {
				what  string
				args  []string
				allow bool
			}{
				{"its node's pod's network-status", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", status(`[{"name":"cbr0"}]`)}, true},
				{"its removal", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/network-status":null}}}`}, true},
				{"another node's pod", []string{"patch", "pod", "theirs", "-n", "default", "--type=merge", "-p", status("[]")}, false},
				{"a label", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"labels":{"app":"db"}}}`}, false},
				{"another annotation", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"annotations":{"keep":"not"}}}`}, false},
				{"an annotation removed", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"annotations":{"keep":null}}}`}, false},
				{"a finalizer", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"finalizers":["x/y"]}}`}, false},
				{"an owner", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"node-b","uid":"1"}]}}`}, false},
				{"the pod's spec", []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"spec":{"activeDeadlineSeconds":1}}`}, false},
				{"the reclaim's Lease", []string{"create", "lease", "cnibox-whereabouts-reclaim", "-n", "kube-system"}, true},
				{"the LB IPAM's Lease", []string{"create", "lease", "cnibox-lb-ipam", "-n", "kube-system"}, true},
				{"another Lease", []string{"create", "lease", "kube-scheduler-2", "-n", "kube-system"}, false},
				// egress (cnibox.yaml's agent: cnibox-multus has no right
				// there), in order: an address's Lease held for node-a,
				// taken over by node-b (as node-b's agent would), released
				// by node-a: refused; held by node-a again; released.
				{"an egress Lease held for itself", []string{"create", "lease", "cnibox-egress-192-0-2-10", "-n", "cnibox-egress", "node-a"}, sa.name == "cnibox"},
				{"an egress Lease held for another node", []string{"create", "lease", "cnibox-egress-192-0-2-11", "-n", "cnibox-egress", "node-b"}, false},
				{"another Lease in the egress namespace", []string{"create", "lease", "other", "-n", "cnibox-egress", "node-a"}, false},
				{"an egress Lease handed to another node", []string{"replace", "lease", "cnibox-egress-192-0-2-10", "-n", "cnibox-egress", "node-b"}, false},
				{"its egress Lease released", []string{"replace", "lease", "cnibox-egress-192-0-2-10", "-n", "cnibox-egress", ""}, sa.name == "cnibox"},
				// a LoadBalancer address's Lease (--lb-announce), in the
				// same namespace under the same rule
				{"an LB address's Lease held for itself", []string{"create", "lease", "cnibox-lb-192-0-2-20", "-n", "cnibox-egress", "node-a"}, sa.name == "cnibox"},
				{"an LB address's Lease held for another node", []string{"create", "lease", "cnibox-lb-192-0-2-21", "-n", "cnibox-egress", "node-b"}, false},
				{"an LB address's Lease handed to another node", []string{"replace", "lease", "cnibox-lb-192-0-2-20", "-n", "cnibox-egress", "node-b"}, false},
			} {
				args := tc.args
				if (args[0] == "create" || args[0] == "replace") && args[1] == "lease" {
					// kubectl has no create lease: a manifest
					f := filepath.Join(t.TempDir(), "lease.yaml")
					holder := ""
					if len(args) > 5 {
						holder = "\nspec: {holderIdentity: '" + args[5] + "'}"
					}
					version := ""
					if args[0] == "replace" { // an update names the version it replaces
						if rv, ok := c.run("", "get", "lease", args[2], "-n", args[4], "-o", "jsonpath={.metadata.resourceVersion}"); ok {
							version = ", resourceVersion: '" + strings.TrimSpace(rv) + "'"
						}
					}
					os.WriteFile(f, []byte("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: "+args[2]+", namespace: "+args[4]+version+"}"+holder+"\n"), 0o600)
					args = []string{args[0], "-f", f}
				}
				out, ok := c.run(token, args...)
				if ok != tc.allow {
					t.Errorf("%s (kubectl %s): allowed %v, want %v: %s", tc.what, strings.Join(args, " "), ok, tc.allow, out)
				}
				if !ok && !tc.allow && !strings.Contains(out, "ValidatingAdmissionPolicy") && !strings.Contains(out, "forbidden") {
					t.Errorf("%s: refused, not by the policy or RBAC: %s", tc.what, out)
				}
			}
			c.must("delete", "lease", "cnibox-whereabouts-reclaim", "-n", "kube-system", "--ignore-not-found")
			c.must("delete", "lease", "cnibox-lb-ipam", "-n", "kube-system", "--ignore-not-found")
			c.must("delete", "lease", "cnibox-egress-192-0-2-10", "-n", "cnibox-egress", "--ignore-not-found")
			if got := c.must("get", "pod", "mine", "-n", "default", "-o", "jsonpath={.metadata.labels.app} {.metadata.annotations.keep} {.metadata.finalizers}"); got != "web me" {
				t.Errorf("pod mine after the refused patches: labels.app, annotations.keep, finalizers %q, want %q", got, "web me")
			}

			// A token bound to no pod names no node: no pod write.
			unbound := c.must("create", "token", sa.name, "-n", "kube-system")
			if out, ok := c.run(unbound, "patch", "pod", "mine", "-n", "default", "--type=merge", "-p", status("[]")); ok || !strings.Contains(out, "ValidatingAdmissionPolicy") {
				t.Errorf("a token bound to no pod patched a pod: %v %s", ok, out)
			}
		})
	}

	// The node's status: the overlay agent's own node, what it writes.
	token := c.must("create", "token", "cnibox", "-n", "kube-system", "--bound-object-kind=Pod", "--bound-object-name=agent-a")
	for _, tc := range []struct {
		what, node, patch string
		allow             bool
	}{
		{"its annotations and label", "node-a", `{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":"10.0.0.1"},"labels":{"cnibox.io/overlay-metadata":"true"}}}`, true},
		{"its NetworkUnavailable condition", "node-a", `{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"FlannelIsUp","message":"x"}]}}`, true},
		{"another node's annotations", "node-b", `{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":"10.0.0.2"}}}`, false},
		{"another label", "node-a", `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`, false},
		{"its Ready condition", "node-a", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"x","message":"x"}]}}`, false},
		{"its addresses", "node-a", `{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`, false},
	} {
		ok, out := c.patch(token, "/api/v1/nodes/"+tc.node+"/status", "application/strategic-merge-patch+json", tc.patch)
		if ok != tc.allow {
			t.Errorf("node status, %s: allowed %v, want %v: %s", tc.what, ok, tc.allow, out)
		}
	}
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestKubeNetworkStatusPolicy: nobody but the agents writes a pod's
// network-status annotation (issue 60, finding 7: a namespace's editor put
// any address into another namespace's MultiNetworkPolicy peers through
// it): not a namespace's editor, not the cluster's admin, not through the
// status subresource, not at a pod's creation; other annotations stay
// theirs to write, and the agent's own write stays allowed (with the
// policy above).
func TestKubeNetworkStatusPolicy(t *testing.T) {
	c := start(t)
	c.create(objects)
	const key = "k8s.v1.cni.cncf.io/network-status"
	forged := `{"metadata":{"annotations":{"` + key + `":` + jsonString(`[{"name":"default/m1","interface":"net1","ips":["192.0.2.99"]}]`) + `}}}`
	// The policy takes a moment to be in force after it is created: wait
	// for it with the admin's patch as a server-side dry run (admission
	// runs, nothing is written), then check the admin's real write.
	deadline := time.Now().Add(time.Minute)
	for {
		out, ok := c.run("", "patch", "pod", "mine", "-n", "default", "--dry-run=server", "--type=merge", "-p", forged)
		if !ok && strings.Contains(out, "ValidatingAdmissionPolicy") && strings.Contains(out, "cnibox-network-status") {
			break
		}
		if !ok {
			t.Fatalf("the admin's dry-run patch refused, not by the network-status policy: %s", out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the network-status policy refuses nothing a minute after it was created: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, ok := c.run("", "patch", "pod", "mine", "-n", "default", "--type=merge", "-p", forged); ok || !strings.Contains(out, "cnibox-network-status") {
		t.Errorf("the admin's patch of pod mine's network-status: allowed %v: %s", ok, out)
	}
	// a namespace's editor (RBAC: patch and create pods in default)
	c.create(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: editor, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-editor, namespace: default}
rules: [{apiGroups: [""], resources: ["pods", "pods/status"], verbs: ["get", "create", "patch", "update"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-editor, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-editor}
subjects: [{kind: ServiceAccount, name: editor, namespace: default}]
`)
	editor := c.must("create", "token", "editor", "-n", "default")
	podWith := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(podWith, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: forged, namespace: default, annotations: {'"+key+"': '[]'}}\nspec: {nodeName: node-b, containers: [{name: c, image: x}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		token string
		args  []string
		allow bool
	}{
		{"the editor's patch", editor, []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", forged}, false},
		{"the editor's patch through status", editor, []string{"patch", "pod", "mine", "-n", "default", "--subresource=status", "--type=merge", "-p", forged}, false},
		{"the editor's pod created with it", editor, []string{"create", "-f", podWith}, false},
		{"the admin's pod created with it", "", []string{"create", "-f", podWith}, false},
		{"the editor's other annotation", editor, []string{"patch", "pod", "mine", "-n", "default", "--type=merge", "-p", `{"metadata":{"annotations":{"note":"ok"}}}`}, true},
	} {
		out, ok := c.run(tc.token, tc.args...)
		if ok != tc.allow {
			t.Errorf("%s: allowed %v, want %v: %s", tc.what, ok, tc.allow, out)
		}
		if !ok && !strings.Contains(out, "cnibox-network-status") {
			t.Errorf("%s: refused, not by the network-status policy: %s", tc.what, out)
		}
	}
	if got := c.must("get", "pod", "mine", "-n", "default", "-o", "jsonpath={.metadata.annotations}"); strings.Contains(got, key) {
		t.Errorf("pod mine has a network-status after the refused writes: %s", got)
	}
	// the agent of node-a, with its bound token, still writes it
	agent := c.must("create", "token", "cnibox", "-n", "kube-system", "--bound-object-kind=Pod", "--bound-object-name=agent-a")
	if out, ok := c.run(agent, "patch", "pod", "mine", "-n", "default", "--type=merge", "-p", forged); !ok {
		t.Errorf("the agent of node-a may not write its pod's network-status: %s", out)
	}
}
