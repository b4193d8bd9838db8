//go:build kube

package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// The multi role's Kubernetes path against a real API server: a Pod object
// with the k8s.v1.cni.cncf.io/networks annotation, cnibox-agent serving the
// pod API (--pod-api-only) from a pod informer, multi ADD/DEL through
// libcni, and the network-status annotation written back on the Pod. The
// test process is the node (a private namespace); pods are namespaces it
// creates.

const (
	networksAnn = "k8s.v1.cni.cncf.io/networks"
	statusAnn   = "k8s.v1.cni.cncf.io/network-status"
)

// nadCRD is the NetworkAttachmentDefinition CRD as Multus installs it.
const nadCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"network-attachment-definitions.k8s.cni.cncf.io"},
"spec":{"group":"k8s.cni.cncf.io","scope":"Namespaced",
 "names":{"plural":"network-attachment-definitions","singular":"network-attachment-definition","kind":"NetworkAttachmentDefinition","shortNames":["net-attach-def"]},
 "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{
   "apiVersion":{"type":"string"},"kind":{"type":"string"},"metadata":{"type":"object"},
   "spec":{"type":"object","properties":{"config":{"type":"string"}}}}}}}]}}`

func mkBridge(br, subnet string, caps string) string {
	return `{"type":"bridge","bridge":"` + br + `","isGateway":true` + caps + `,"ipam":{"type":"host-local","ranges":[[{"subnet":"` + subnet + `"}]]}}`
}

// installNAD installs the NetworkAttachmentDefinition CRD and creates one.
func installNAD(t *testing.T, cs kubernetes.Interface, ns, name, config string) {
	path := "/apis/k8s.cni.cncf.io/v1/namespaces/" + ns + "/network-attachment-definitions"
	kube.CreateCRD(t, cs, []byte(nadCRD), path)
	nad, _ := json.Marshal(map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"config": config},
	})
	must(t, cs.CoreV1().RESTClient().Post().AbsPath(path).Body(nad).SetHeader("Content-Type", "application/json").Do(context.Background()).Error())
}

// createPod creates a pod on node with the networks annotation (no kubelet
// runs it) and returns its UID.
func createPod(t *testing.T, cs kubernetes.Interface, node, name, networks string) string {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{networksAnn: networks}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	p, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	must(t, err)
	return string(p.UID)
}

type netStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	MAC       string   `json:"mac"`
	Default   bool     `json:"default"`
}

func podStatus(t *testing.T, cs kubernetes.Interface, name string) (string, bool) {
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	v, ok := p.Annotations[statusAnn]
	return v, ok
}

func podLinks(t *testing.T, ns string) map[string]bool {
	h, err := netops.Open(ns)
	must(t, err)
	defer h.Close()
	links, err := h.Links()
	must(t, err)
	out := map[string]bool{}
	for _, l := range links {
		out[l.Name] = true
	}
	return out
}

// startPodAPI runs cnibox-agent --pod-api-only and waits for its socket.
// The NADs of the namespaces trusted names may use any role and field
// (--nad-trusted-namespaces).
func startPodAPI(t *testing.T, agentBin, kubeconfig, node, sock, trusted string) (stop func()) {
	logf, err := os.Create(filepath.Join(t.TempDir(), "agent.log"))
	must(t, err)
	cmd := exec.Command(agentBin, "--pod-api-only", "--socket", sock, "--kubeconfig-file", kubeconfig, "--node-name", node, "--log-level", "debug",
		"--nad-trusted-namespaces", trusted)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(waitFor):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", b)
		}
	})
	deadline := time.Now().Add(waitFor)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the agent's socket %s never answered: %v\n%s", sock, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKubeMulti(t *testing.T) {
	cniboxBin, agentBin := binaries(t)
	cs, kubeconfig := kube.Client(t)
	ctx := context.Background()
	const node = "mk-node"
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	must(t, err)
	// No controller creates service accounts here; pod admission wants one.
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// "red" is a NetworkAttachmentDefinition; "blue" a file in confDir.
	installNAD(t, cs, "default", "red", `{"cniVersion":"1.0.0","name":"red","plugins":[`+mkBridge("mk-red", "10.78.2.0/24", `,"capabilities":{"ips":true}`)+`]}`)
	confDir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(confDir, "10-blue.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"blue","plugins":[`+mkBridge("mk-blue", "10.78.1.0/24", "")+`]}`), 0o644))

	binDir := t.TempDir()
	if out, err := exec.Command(cniboxBin, "install", "--dir", binDir).CombinedOutput(); err != nil {
		t.Fatalf("cnibox install: %v\n%s", err, out)
	}
	t.Setenv("CNIBOX_DATA_DIR", t.TempDir())
	sock := filepath.Join(t.TempDir(), "agent.sock")
	conflist := `{"cniVersion":"1.0.0","name":"mk","plugins":[{"type":"multi","kubernetes":true,"agentSocket":"` + sock + `","confDir":"` + confDir + `",
		"delegates":[{"name":"primary","type":"bridge","bridge":"mk-pri","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.78.0.0/24"}]]}}]}]}`
	list, err := libcni.ConfListFromBytes([]byte(conflist))
	must(t, err)
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
	rt := func(name, uid, ns string) *libcni.RuntimeConf {
		return &libcni.RuntimeConf{ContainerID: "mk-" + name, NetNS: ns, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", uid}}}
	}

	// Without the agent, a pod is refused with error 11 naming the socket.
	uidA := createPod(t, cs, node, "mk-a", "blue, default/red@data1")
	nsA := nstest.NewNS(t, "mk-a")
	_, err = cni.AddNetworkList(ctx, list, rt("mk-a", uidA, nsA))
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrTryAgainLater || !strings.Contains(err.Error(), sock) {
		t.Fatalf("ADD without the agent = %v; want error 11 naming %s", err, sock)
	}

	// red is a bridge (an object of the node): its namespace must be trusted.
	stop := startPodAPI(t, agentBin, kubeconfig, node, sock, "default")

	// Pod a: the comma form; blue gets net1, red the interface it asks for.
	if _, err := cni.AddNetworkList(ctx, list, rt("mk-a", uidA, nsA)); err != nil {
		t.Fatalf("ADD mk-a: %v", err)
	}
	links := podLinks(t, nsA)
	for _, l := range []string{"eth0", "net1", "data1"} {
		if !links[l] {
			t.Errorf("pod mk-a has no %s: %v", l, links)
		}
	}
	v, ok := podStatus(t, cs, "mk-a")
	var st []netStatus
	if !ok || json.Unmarshal([]byte(v), &st) != nil {
		t.Fatalf("pod mk-a network-status = %q (present %v): want a JSON list", v, ok)
	}
	want := []struct{ name, ifname, subnet string }{
		{"primary", "eth0", "10.78.0.0/24"}, {"default/blue", "net1", "10.78.1.0/24"}, {"default/red", "data1", "10.78.2.0/24"},
	}
	if len(st) != len(want) {
		t.Fatalf("network-status has %d entries, want %d: %s", len(st), len(want), v)
	}
	for i, w := range want {
		s := st[i]
		if s.Name != w.name || s.Interface != w.ifname || s.Default != (i == 0) || s.MAC == "" || len(s.IPs) != 1 ||
			!netip.MustParsePrefix(w.subnet).Contains(netip.MustParseAddr(s.IPs[0])) {
			t.Errorf("network-status[%d] = %+v; want %s on %s in %s (default %v) with a MAC", i, s, w.name, w.ifname, w.subnet, i == 0)
		}
	}

	// Pod b: the JSON form with a requested address, served while the
	// informer already runs.
	uidB := createPod(t, cs, node, "mk-b", `[{"name":"red","namespace":"default","interface":"net1","ips":["10.78.2.50/24"]}]`)
	nsB := nstest.NewNS(t, "mk-b")
	if _, err := cni.AddNetworkList(ctx, list, rt("mk-b", uidB, nsB)); err != nil {
		t.Fatalf("ADD mk-b: %v", err)
	}
	v, _ = podStatus(t, cs, "mk-b")
	st = nil
	json.Unmarshal([]byte(v), &st)
	if len(st) != 2 || st[1].Name != "default/red" || st[1].Interface != "net1" || len(st[1].IPs) != 1 || st[1].IPs[0] != "10.78.2.50" {
		t.Errorf("pod mk-b network-status = %s; want default/red on net1 with 10.78.2.50", v)
	}
	if l := podLinks(t, nsB); !l["eth0"] || !l["net1"] {
		t.Errorf("pod mk-b links %v; want eth0 and net1", l)
	}

	// DEL of a (agent up, twice): every interface gone, network-status
	// removed.
	for range 2 {
		if err := cni.DelNetworkList(ctx, list, rt("mk-a", uidA, nsA)); err != nil {
			t.Errorf("DEL mk-a: %v", err)
		}
	}
	links = podLinks(t, nsA)
	for _, l := range []string{"eth0", "net1", "data1"} {
		if links[l] {
			t.Errorf("pod mk-a still has %s after DEL", l)
		}
	}
	if v, ok := podStatus(t, cs, "mk-a"); ok {
		t.Errorf("pod mk-a network-status after DEL = %s; want none", v)
	}

	// DEL of b with the agent gone: it works from the store record alone.
	stop()
	for range 2 {
		if err := cni.DelNetworkList(ctx, list, rt("mk-b", uidB, nsB)); err != nil {
			t.Errorf("DEL mk-b without the agent: %v", err)
		}
	}
	if l := podLinks(t, nsB); l["eth0"] || l["net1"] {
		t.Errorf("pod mk-b links after DEL: %v", l)
	}
	// The address is free again: another pod may ask for it.
	uidC := createPod(t, cs, node, "mk-c", `[{"name":"red","interface":"net1","ips":["10.78.2.50/24"]}]`)
	nsC := nstest.NewNS(t, "mk-c")
	startPodAPI(t, agentBin, kubeconfig, node, sock, "default")
	if _, err := cni.AddNetworkList(ctx, list, rt("mk-c", uidC, nsC)); err != nil {
		t.Errorf("ADD mk-c with mk-b's released address: %v", err)
	}
	for range 2 {
		if err := cni.DelNetworkList(ctx, list, rt("mk-c", uidC, nsC)); err != nil {
			t.Errorf("DEL mk-c: %v", err)
		}
	}
}
