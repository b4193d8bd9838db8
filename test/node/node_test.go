//go:build kube

package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeNode is the real-node test (the package comment says what it
// proves). Its steps build on each other and run in order.
func TestKubeNode(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	manifest := env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)")
	start := time.Now()
	n := startNode(t)
	t.Logf("the node's kubelet is up after %v (dir %s)", time.Since(start).Round(time.Second), n.dir)
	d := render(t, n, manifest)

	bb := filepath.Join(n.dir, "busybox.tar")
	writeBusyboxImage(t, bb, busyboxRef)
	n.ctr("images", "import", bb)
	n.ctr("images", "import", imageTar)
	if images := n.ctr("images", "ls", "-q"); !strings.Contains(images, ctrName(d.image)+"\n") {
		t.Fatalf("%s holds no image %s (the manifest's %s): the node has\n%s", imageTar, ctrName(d.image), d.image, images)
	}

	var cidr netip.Prefix
	step(t, "the node is NotReady without a CNI", func() { notReadyWithoutCNI(t, n) })
	step(t, "kubectl apply: the DaemonSet installs cnibox and the node turns Ready", func() { install(t, n, d) })
	step(t, "the node's podCIDR and the agent's subnet.env agree", func() { cidr = podCIDR(t, n, d) })
	step(t, "pods get addresses in the podCIDR and reach each other", func() {
		startPods(t, n, cidr, nil, "pod-a", "pod-b")
		mustPing(t, n, "pod-a", "pod-b")
		mustPing(t, n, "pod-b", "pod-a")
	})
	step(t, "a rollout of a new image keeps running pods reachable", func() { rollout(t, n, d, cidr) })
	step(t, "a pod naming a NetworkAttachmentDefinition gets its second interface", func() { attachment(t, n, d, cidr) })
	step(t, "deleting pods releases their addresses", func() { release(t, n) })
	step(t, "kubectl delete -f leaves the node's running pods alone", func() { uninstall(t, n, d) })
	t.Logf("the real-node test took %v", time.Since(start).Round(time.Second))
}

// getNode returns the node object.
func getNode(t *testing.T, n *node) corev1.Node {
	t.Helper()
	var nd corev1.Node
	if err := json.Unmarshal([]byte(n.must("get", "node", nodeName, "-o", "json")), &nd); err != nil {
		t.Fatal(err)
	}
	return nd
}

func readyCondition(nd corev1.Node) (corev1.NodeCondition, bool) {
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// notReadyWithoutCNI: the kubelet registers the node, NotReady because the
// runtime has no network config yet.
func notReadyWithoutCNI(t *testing.T, n *node) {
	n.poll("the node registered, NotReady for want of a network", func() error {
		out, err := n.kubectl("get", "node", nodeName, "-o", "json")
		if err != nil {
			return err
		}
		var nd corev1.Node
		if err := json.Unmarshal([]byte(out), &nd); err != nil {
			return err
		}
		c, ok := readyCondition(nd)
		if !ok || c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "NetworkReady=false") {
			return fmt.Errorf("Ready condition %+v", c)
		}
		t.Logf("node %s: Ready=%s: %s", nodeName, c.Status, c.Message)
		return nil
	})
}

// install applies the manifest and waits for the node to turn Ready, then
// checks what the install step put on the node and that the agent is ready
// (its readiness probe: the lease is held, the VXLAN device up).
func install(t *testing.T, n *node, d deployment) {
	if out, err := n.kubectlIn(d.yaml, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply -f the manifest: %v", err)
	} else {
		t.Logf("kubectl apply -f:\n%s", strings.TrimSpace(out))
	}
	n.must("wait", "--for=condition=Ready", "node/"+nodeName, n.timeout())
	bin := n.hostDir("/opt/cni/bin")
	if fi, err := os.Lstat(filepath.Join(bin, "cnibox")); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		t.Fatalf("the node is Ready but %s/cnibox is not an executable file: %v %v", bin, fi, err)
	}
	for _, role := range []string{"flannel", "bridge", "host-local", "portmap", "loopback", "multi"} {
		if target, err := os.Readlink(filepath.Join(bin, role)); err != nil || target != "cnibox" {
			t.Errorf("%s/%s: want a relative link to cnibox, got %q %v", bin, role, target, err)
		}
	}
	checkConflist(t, n, d.cniConf)
	n.must("-n", "kube-system", "rollout", "status", "ds/cnibox", n.timeout())
}

// checkConflist: the conflist in the node's conf dir is conf.
func checkConflist(t *testing.T, n *node, conf string) {
	t.Helper()
	path := filepath.Join(n.hostDir("/etc/cni/net.d"), "10-cnibox.conflist")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(conf), &w) != nil || !reflect.DeepEqual(g, w) {
		t.Fatalf("%s is not the ConfigMap's cni-conf.json:\n%s\nwant\n%s", path, got, conf)
	}
}

// podCIDR: the node's spec.podCIDR (kube-controller-manager's node IPAM)
// is the subnet of subnet.env, which the agent wrote and the flannel role
// reads; the node's annotations carry the agent's VTEP on the node's IP.
func podCIDR(t *testing.T, n *node, d deployment) netip.Prefix {
	nd := getNode(t, n)
	cidr, err := netip.ParsePrefix(nd.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node %s: podCIDR %q: %v", nodeName, nd.Spec.PodCIDR, err)
	}
	data, err := n.nodeFile("/run/flannel/subnet.env")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	sub, err := netip.ParsePrefix(env["FLANNEL_SUBNET"])
	if err != nil || sub.Masked() != cidr {
		t.Fatalf("subnet.env's FLANNEL_SUBNET %q is not the node's podCIDR %s:\n%s", env["FLANNEL_SUBNET"], cidr, data)
	}
	if env["FLANNEL_NETWORK"] != d.network {
		t.Fatalf("subnet.env's FLANNEL_NETWORK %q is not net-conf.json's Network %s", env["FLANNEL_NETWORK"], d.network)
	}
	if network := netip.MustParsePrefix(d.network); !network.Contains(cidr.Addr()) || cidr.Bits() < network.Bits() {
		t.Fatalf("the podCIDR %s is not in the cluster network %s", cidr, network)
	}
	for k, want := range map[string]string{"flannel.alpha.coreos.com/public-ip": nodeIP, "flannel.alpha.coreos.com/backend-type": "vxlan"} {
		if got := nd.Annotations[k]; got != want {
			t.Errorf("node annotation %s = %q, want %q", k, got, want)
		}
	}
	t.Logf("podCIDR %s, subnet.env:\n%s", cidr, data)
	return cidr
}

// podManifest is a pod of the busybox image on the node.
func podManifest(name string, annotations map[string]string) string {
	return podSpec(name, "", annotations)
}

// podSpec is a pod of the busybox image, bound to node unless it is "".
func podSpec(name, node string, annotations map[string]string) string {
	return busyboxPod("default", name, node, nil, annotations, "sleep", "86400")
}

// busyboxPod is a pod ns/name of the busybox image running cmd, bound to
// node unless it is "".
func busyboxPod(ns, name, node string, labels, annotations map[string]string, cmd ...string) string {
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64(1)),
			AutomountServiceAccountToken:  new(false),
			Containers: []corev1.Container{{
				Name: "c", Image: busyboxRef, ImagePullPolicy: corev1.PullNever,
				Command: cmd,
			}},
		},
	}
	out, _ := json.Marshal(p)
	return string(out)
}

// startPods creates the pods, waits until they are Ready and checks that
// their addresses are in cidr.
func startPods(t *testing.T, n *node, cidr netip.Prefix, annotations map[string]string, names ...string) {
	t.Helper()
	for _, name := range names {
		n.apply(podManifest(name, annotations))
	}
	args := []string{"wait", "--for=condition=Ready", n.timeout()}
	for _, name := range names {
		args = append(args, "pod/"+name)
	}
	n.must(args...)
	for _, name := range names {
		if ip := podIP(t, n, name); !cidr.Contains(ip) {
			t.Fatalf("pod %s has the address %s, outside the node's podCIDR %s", name, ip, cidr)
		} else {
			t.Logf("pod %s: %s", name, ip)
		}
	}
}

func getPod(t *testing.T, n *node, name string) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal([]byte(n.must("get", "pod", name, "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func podIP(t *testing.T, n *node, name string) netip.Addr {
	t.Helper()
	p := getPod(t, n, name)
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		t.Fatalf("pod %s: podIP %q: %v", name, p.Status.PodIP, err)
	}
	return ip
}

// mustPing: pod from reaches pod to (busybox ping in from, as kubectl exec).
func mustPing(t *testing.T, n *node, from, to string) {
	t.Helper()
	ip := podIP(t, n, to).String()
	if out, err := n.kubectl("exec", from, "--", "ping", "-c", "3", "-W", "5", ip); err != nil {
		t.Fatalf("pod %s cannot reach pod %s (%s): %v\n%s", from, to, ip, err, out)
	}
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) packets received`)

// syncBuffer is a bytes.Buffer a command writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rollout re-tags the image (a new image as far as Kubernetes can tell),
// sets it on the DaemonSet while pod-a pings pod-b, and checks that no
// ping went unanswered through the rollout, that the new pod runs the new
// image and kept the node's lease (subnet.env), and that a pod created
// afterwards gets its address (the new binary works).
func rollout(t *testing.T, n *node, d deployment, cidr netip.Prefix) {
	next := retag(n, d, "-rollout")
	rolloutWith(t, n, next, "pod-c", cidr, func() {
		n.must("-n", "kube-system", "set", "image", "ds/cnibox", "*="+next)
	})
}

// retag tags the manifest's image NAME:TAG+suffix in the node's containerd
// and returns that name.
func retag(n *node, d deployment, suffix string) string {
	tag, _, _ := strings.Cut(d.image, "@") // NAME:TAG of NAME:TAG@DIGEST
	next := tag + suffix
	n.ctr("images", "tag", ctrName(d.image), next)
	return next
}

// rolloutWith runs roll, which moves the DaemonSet to the image next, while
// pod-a pings pod-b: no ping goes unanswered, the new pod runs next and
// kept the node's lease, and the pod fresh, created afterwards, gets its
// address in cidr and reaches pod-a.
func rolloutWith(t *testing.T, n *node, next, fresh string, cidr netip.Prefix, roll func()) {
	lease, err := n.nodeFile("/run/flannel/subnet.env")
	if err != nil {
		t.Fatal(err)
	}
	old := strings.TrimSpace(n.must("-n", "kube-system", "get", "pods", "-l", "app=cnibox", "-o", "jsonpath={.items[*].metadata.name}"))

	// ping until told to stop (SIGINT: it prints its statistics); -w bounds it.
	ping := n.kubectlCmd("exec", "pod-a", "--", "ping", "-i", "0.2", "-w", "900", podIP(t, n, "pod-b").String())
	var pingOut syncBuffer
	ping.Stdout, ping.Stderr = &pingOut, &pingOut
	if err := ping.Start(); err != nil {
		t.Fatal(err)
	}
	pingDone := make(chan error, 1)
	go func() { pingDone <- ping.Wait() }()
	defer ping.Process.Kill()
	n.poll("ping running", func() error {
		if !strings.Contains(pingOut.String(), "bytes from") {
			return fmt.Errorf("no reply yet: %q", pingOut.String())
		}
		return nil
	})

	roll()
	n.must("-n", "kube-system", "rollout", "status", "ds/cnibox", n.timeout())
	var pods corev1.PodList
	if err := json.Unmarshal([]byte(n.must("-n", "kube-system", "get", "pods", "-l", "app=cnibox", "-o", "json")), &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name == old || pods.Items[0].Spec.Containers[0].Image != next ||
		pods.Items[0].Spec.InitContainers[0].Image != next {
		t.Fatalf("after the rollout: want one new pod (not %s) with %s, got %+v", old, next, pods.Items)
	}

	// the new agent took over the node's lease
	if now, err := n.nodeFile("/run/flannel/subnet.env"); err != nil || !bytes.Equal(now, lease) {
		t.Fatalf("subnet.env changed through the rollout: %v\n%s\nwas\n%s", err, now, lease)
	}

	if _, err := n.kubectl("exec", "pod-a", "--", "killall", "-INT", "ping"); err != nil {
		t.Fatalf("stop the ping: %v", err)
	}
	select {
	case <-pingDone:
	case <-time.After(time.Minute):
		t.Fatalf("ping did not stop: %s", pingOut.String())
	}
	m := pingStats.FindStringSubmatch(pingOut.String())
	if m == nil {
		t.Fatalf("no ping statistics:\n%s", pingOut.String())
	}
	sent, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	// the last request may be in flight when ping is stopped
	if sent < 5 || got < sent-1 {
		t.Fatalf("pod-a pinging pod-b through the rollout: %d sent, %d answered\n%s", sent, got, pingOut.String())
	}
	t.Logf("pod-a pinged pod-b through the rollout: %d sent, %d answered", sent, got)

	startPods(t, n, cidr, nil, fresh)
	mustPing(t, n, fresh, "pod-a")
}

// nadCRDFile is the NetworkAttachmentDefinition CRD as cnibox ships it
// (the same object Multus installs), applied on its own.
const nadCRDFile = "../../deploy/kubernetes/nad-crd.yaml"

// whereaboutsCRDFile is whereabouts' three CRDs as cnibox ships them.
const whereaboutsCRDFile = "../../deploy/kubernetes/whereabouts-crds.yaml"

// applyNADCRD applies nadCRDFile and waits until the API serves NADs.
func applyNADCRD(t *testing.T, n *node) {
	t.Helper()
	applyCRDs(t, n, nadCRDFile, "network-attachment-definitions.k8s.cni.cncf.io")
}

// applyCRDs applies file and waits until each CRD of names is established.
func applyCRDs(t *testing.T, n *node, file string, names ...string) {
	t.Helper()
	crd, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n.apply(string(crd))
	for _, name := range names {
		n.crdEstablished(name)
	}
}

// crdEstablished waits until the CRD name is established. Not with
// kubectl wait --for=condition=Established: a CRD is stored with
// "conditions": null until the API server's controllers set them, and
// kubectl wait then fails at once (".status.conditions accessor error:
// <nil> is of the type <nil>", kubernetes#66439; a fresh CI run at 122ff48
// failed TestKubeNodeMultusOverBridge so) instead of waiting. Pods and
// nodes leave out conditions they do not have, so their waits are not
// affected.
func (n *node) crdEstablished(name string) {
	n.t.Helper()
	n.poll("the CRD "+name+" established", func() error {
		out, err := n.kubectl("get", "crd/"+name, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		if err == nil && out != "True" {
			err = fmt.Errorf("Established %q", out)
		}
		return err
	})
}

// blueNet is the second network: a bridge of its own with host-local.
var blueNet = netip.MustParsePrefix("10.99.0.0/24")

const blueNAD = `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition",
"metadata":{"name":"blue","namespace":"default"},
"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"name\":\"blue\",\"plugins\":[{\"type\":\"bridge\",\"bridge\":\"br-blue\",\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"10.99.0.0/24\"}]]}}]}"}}`

// multiConf wraps the ConfigMap's conflist into multi with the pod path on
// (docs/roles/multi.md): the pod network stays what it was, and a pod's
// k8s.v1.cni.cncf.io/networks annotation adds networks.
func multiConf(t *testing.T, conf string) string {
	var primary map[string]any
	if err := json.Unmarshal([]byte(conf), &primary); err != nil {
		t.Fatalf("cni-conf.json: %v", err)
	}
	// The delegate keeps the ConfigMap's cniVersion (0.3.1 for flannel +
	// portmap, as kube-flannel ships): multi hands each plugin the previous
	// result in that version.
	out, _ := json.MarshalIndent(map[string]any{
		"name":       "cnibox-multi",
		"cniVersion": "1.0.0",
		"plugins": []any{map[string]any{
			"type":         "multi",
			"kubernetes":   true,
			"capabilities": map[string]bool{"portMappings": true},
			"delegates":    []any{primary},
		}},
	}, "", "  ")
	return string(out)
}

type netStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Default   bool     `json:"default"`
}

// attachment installs the NetworkAttachmentDefinition CRD and a network,
// switches the ConfigMap's conflist to multi (and restarts the DaemonSet,
// as docs/deploy.md says, to install it), and starts a pod naming the
// network: it gets net1 in that network besides eth0, and multi writes the
// network-status annotation.
func attachment(t *testing.T, n *node, d deployment, cidr netip.Prefix) {
	switchToMulti(t, n, d)
	n.apply(blueNAD)

	startPods(t, n, cidr, map[string]string{"k8s.v1.cni.cncf.io/networks": "blue"}, "pod-m")
	p := getPod(t, n, "pod-m")
	raw := p.Annotations["k8s.v1.cni.cncf.io/network-status"]
	var st []netStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st) != 2 {
		t.Fatalf("pod-m's network-status: want 2 entries, got %q (%v)", raw, err)
	}
	if s := st[0]; !s.Default || s.Interface != "eth0" || len(s.IPs) != 1 || s.IPs[0] != p.Status.PodIP {
		t.Errorf("network-status[0]: want the default network on eth0 with %s, got %+v", p.Status.PodIP, s)
	}
	s := st[1]
	var blueIP netip.Addr
	if len(s.IPs) == 1 {
		blueIP, _ = netip.ParseAddr(s.IPs[0])
	}
	if s.Name != "default/blue" || s.Interface != "net1" || s.Default || !blueNet.Contains(blueIP) {
		t.Fatalf("network-status[1]: want default/blue on net1 with an address in %s, got %+v", blueNet, s)
	}
	out := n.must("exec", "pod-m", "--", "ip", "-o", "-4", "addr", "show", "dev", "net1")
	if !strings.Contains(out, " "+blueIP.String()+"/24 ") {
		t.Fatalf("pod-m's net1 lacks %s/24: %s", blueIP, out)
	}
	t.Logf("pod-m: eth0 %s, net1 %s; network-status %s", p.Status.PodIP, blueIP, raw)
	mustPing(t, n, "pod-m", "pod-b")
}

// switchToMulti installs the NetworkAttachmentDefinition CRD and switches
// the ConfigMap's conflist to multi (multiConf), restarting the DaemonSet
// to install it, as docs/deploy.md says.
func switchToMulti(t *testing.T, n *node, d deployment) {
	applyNADCRD(t, n)
	conf := multiConf(t, d.cniConf)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"cni-conf.json": conf}})
	n.must("-n", "kube-system", "patch", "configmap", "cnibox", "--type=merge", "-p", string(patch))
	n.must("-n", "kube-system", "rollout", "restart", "ds/cnibox")
	n.must("-n", "kube-system", "rollout", "status", "ds/cnibox", n.timeout())
	checkConflist(t, n, conf)
}

// ipamView is what `cnibox inspect ipam --json` prints, the parts used.
type ipamView struct {
	Network      string `json:"network"`
	Reservations []struct {
		Addr        netip.Addr `json:"addr"`
		IfName      string     `json:"ifName"`
		Pod         string     `json:"pod"`
		EarlierBoot bool       `json:"earlierBoot"`
	} `json:"reservations"`
}

// endpointView is what `cnibox inspect endpoints --json` prints, the
// parts used.
type endpointView struct {
	Network      string `json:"network"`
	IfName       string `json:"ifName"`
	PodNamespace string `json:"podNamespace"`
	PodName      string `json:"podName"`
}

// inspectIPAM is `cnibox inspect ipam --json` on the node.
func inspectIPAM(t *testing.T, n *node) []ipamView {
	t.Helper()
	cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
	out, err := n.onNode(cnibox, "inspect", "ipam", "--json", "--conf-dir", n.hostDir("/etc/cni/net.d"))
	if err != nil {
		t.Fatalf("cnibox inspect ipam: %v", err)
	}
	var pools []ipamView
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatalf("cnibox inspect ipam --json: %v\n%s", err, out)
	}
	return pools
}

// nodeState is the pods' reservations and endpoints in the node's store,
// by `network ifname pod`, as cnibox inspect on the node shows them.
func nodeState(t *testing.T, n *node) (reserved, endpoints map[string]bool) {
	t.Helper()
	cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
	reserved = map[string]bool{}
	for _, p := range inspectIPAM(t, n) {
		for _, r := range p.Reservations {
			reserved[p.Network+" "+r.IfName+" "+r.Pod] = true
		}
	}
	out, err := n.onNode(cnibox, "inspect", "endpoints", "--json")
	if err != nil {
		t.Fatalf("cnibox inspect endpoints: %v", err)
	}
	var eps []endpointView
	if err := json.Unmarshal([]byte(out), &eps); err != nil {
		t.Fatalf("cnibox inspect endpoints --json: %v\n%s", err, out)
	}
	endpoints = map[string]bool{}
	for _, e := range eps {
		endpoints[e.Network+" "+e.IfName+" "+e.PodNamespace+"/"+e.PodName] = true
	}
	return reserved, endpoints
}

// release deletes pod-a (attached by the flannel conflist, deleted under
// multi's) and pod-m (two networks): their reservations and endpoint
// records leave the node's store; pod-b's and pod-c's stay.
func release(t *testing.T, n *node) {
	primary := podNetwork(t, n)
	gone := []string{primary + " eth0 default/pod-a", primary + " eth0 default/pod-m", "blue net1 default/pod-m"}
	kept := []string{primary + " eth0 default/pod-b", primary + " eth0 default/pod-c"}
	reserved, endpoints := nodeState(t, n)
	for _, k := range append(gone, kept...) {
		if !reserved[k] || !endpoints[k] {
			t.Fatalf("before the delete, the store lacks %q (reserved %v, endpoint %v): %v %v", k, reserved[k], endpoints[k], reserved, endpoints)
		}
	}
	n.must("delete", "pod", "pod-a", "pod-m", "--wait", n.timeout())
	n.poll("the deleted pods' addresses released", func() error {
		reserved, endpoints := nodeState(t, n)
		for _, k := range gone {
			if reserved[k] || endpoints[k] {
				return fmt.Errorf("%q still in the store (reserved %v, endpoint %v)", k, reserved[k], endpoints[k])
			}
		}
		return nil
	})
	reserved, endpoints = nodeState(t, n)
	for _, k := range kept {
		if !reserved[k] || !endpoints[k] {
			t.Fatalf("after deleting other pods, the store lost %q", k)
		}
	}
}

// podNetwork is the name of the pod network: multi's first delegate, the
// conflist of the ConfigMap as it was (its pods keep their records under
// that name through the switch to multi).
func podNetwork(t *testing.T, n *node) string {
	t.Helper()
	var list struct {
		Plugins []struct {
			Delegates []struct {
				Name string `json:"name"`
			} `json:"delegates"`
		} `json:"plugins"`
	}
	data, err := os.ReadFile(filepath.Join(n.hostDir("/etc/cni/net.d"), "10-cnibox.conflist"))
	if err == nil {
		err = json.Unmarshal(data, &list)
	}
	if err != nil || len(list.Plugins) == 0 || len(list.Plugins[0].Delegates) == 0 {
		t.Fatalf("the multi conflist's first delegate: %v\n%s", err, data)
	}
	return list.Plugins[0].Delegates[0].Name
}

// uninstall deletes everything the manifest created: the DaemonSet's pod
// goes, and the pods running on the node keep their addresses and reach
// each other; the plugins and the conflist stay on the node.
func uninstall(t *testing.T, n *node, d deployment) {
	uninstallWith(t, n, "kubectl delete -f", func() error {
		_, err := n.kubectlIn(d.yaml, "delete", "-f", "-", "--wait", n.timeout())
		return err
	})
}

// uninstallWith runs del, named how, which deletes cnibox's objects: the
// agent's pods go, pod-b and pod-c keep running with their addresses and
// reach each other, the node keeps cnibox's files and stays Ready.
func uninstallWith(t *testing.T, n *node, how string, del func() error) {
	before := map[string]netip.Addr{"pod-b": podIP(t, n, "pod-b"), "pod-c": podIP(t, n, "pod-c")}
	if err := del(); err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	n.must("-n", "kube-system", "wait", "--for=delete", "pod", "-l", "app=cnibox", n.timeout())
	for name, ip := range before {
		p := getPod(t, n, name)
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != ip.String() {
			t.Fatalf("after %s, pod %s is %s with %q (was Running with %s)", how, name, p.Status.Phase, p.Status.PodIP, ip)
		}
	}
	mustPing(t, n, "pod-b", "pod-c")
	mustPing(t, n, "pod-c", "pod-b")
	for _, p := range []string{filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox"), filepath.Join(n.hostDir("/etc/cni/net.d"), "10-cnibox.conflist")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed a file from the node: %v", how, err)
		}
	}
	if c, _ := readyCondition(getNode(t, n)); c.Status != corev1.ConditionTrue {
		t.Errorf("after %s the node is not Ready: %+v", how, c)
	}
}
