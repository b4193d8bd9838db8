package cluster

import (
	"net/netip"
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// apiPod is a running pod x/name of node n1 at 10.1.0.1 with named ports,
// a sidecar's among them, and a secondary network.
func apiPod(name string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, ResourceVersion: "7", Labels: map[string]string{"pod": name},
			Annotations: map[string]string{"big": "x", agentapi.NetworkStatusAnnotation: `[{"name":"cbr0","interface":"eth0","ips":["10.1.0.1"],"default":true},` +
				`{"name":"x/m1","interface":"net1","ips":["192.0.2.1/24"]}]`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "n1",
			Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80},
				{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 81}}}},
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 90}}},
				{Name: "init", Ports: []corev1.ContainerPort{{Name: "init", ContainerPort: 91}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}, {IP: "fd00::1"}}},
	}
}

// TestSlim: the informers keep of a Pod, a Namespace and a Node what the
// agent's readers read (NetworkPolicy, MultiNetworkPolicy, egress), the
// informer's key and resource version readable; the transform passes
// slim objects through (it must be idempotent).
func TestSlim(t *testing.T) {
	got, bad := slim(apiPod("a"), keep{})
	if bad != nil {
		t.Fatal(bad)
	}
	p := got.(*Pod)
	m, err := apimeta.Accessor(p)
	if err != nil || m.GetName() != "a" || m.GetNamespace() != "x" || m.GetResourceVersion() != "7" {
		t.Errorf("the informer's view of the slim pod: %v, %v", m, err)
	}
	if key, err := cache.MetaNamespaceKeyFunc(p); err != nil || key != "x/a" {
		t.Errorf("the informer's key %q, %v", key, err)
	}
	kept := *p
	kept.labels = nil // the interned set behind Labels
	want := Pod{Namespace: "x", Name: "a", Node: "n1", Labels: map[string]string{"pod": "a"}, ResourceVersion: "7",
		IPs: []netip.Addr{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("fd00::1")},
		Ports: []NamedPort{{Name: "web", Proto: policymodel.TCP, Port: 80}, {Name: "dns", Proto: policymodel.UDP, Port: 53},
			{Name: "side", Proto: policymodel.TCP, Port: 90}},
		Attachments: []Attachment{{Network: "x/m1", Iface: "net1", IPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}}}
	if !reflect.DeepEqual(kept, want) {
		t.Errorf("pod %+v, want %+v", kept, want)
	}
	if again, _ := slim(p, keep{}); again != any(p) {
		t.Errorf("slim of a slim pod is a new object")
	}
	done := apiPod("d")
	done.Status.Phase = corev1.PodSucceeded
	done.Annotations[agentapi.NetworkStatusAnnotation] = "{not a list"
	sd, bad := slim(done, keep{})
	if d := sd.(*Pod); !d.Done || d.Attachments != nil || bad == nil {
		t.Errorf("a finished pod with a bad network-status: done %v, attachments %v, error %v", d.Done, d.Attachments, bad)
	}

	ns, _ := slim(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "u1", ResourceVersion: "3", Labels: map[string]string{"ns": "x"},
		Annotations: map[string]string{FlowLogAnnotation: "deny", "other": "y"}}}, keep{})
	n := ns.(*Namespace)
	if !reflect.DeepEqual(*n, Namespace{Name: "x", UID: "u1", Labels: map[string]string{"ns": "x"}, FlowLog: "deny", ResourceVersion: "3"}) {
		t.Errorf("namespace %+v", n)
	}
	if m, _ := apimeta.Accessor(n); m.GetUID() != "u1" || m.GetName() != "x" {
		t.Errorf("the namespace's metadata: %v", m)
	}
	no, _ := slim(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"},
		Annotations: map[string]string{EgressNetworksAnnotation: "192.0.2.0/24", "other": "y", "lease/backend-data": "{}"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:1::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"},
			{Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeExternalIP, Address: "192.0.2.9"}, {Type: corev1.NodeInternalIP, Address: "192.0.2.3"}}}},
		keep{nodeAnnotations: []string{"lease/backend-data", "lease/public-ip"}})
	if nd := no.(*Node); !reflect.DeepEqual(*nd, Node{Name: "n1", Labels: map[string]string{"a": "b"}, EgressNetworks: "192.0.2.0/24",
		Annotations: map[string]string{"lease/backend-data": "{}"},
		IPs:         []netip.Addr{netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("192.0.2.9")},
		HostIPs:     []netip.Addr{netip.MustParseAddr("192.0.2.9")}, // the first InternalIP
		PodCIDRs:    []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/64")}}) {
		t.Errorf("node %+v", nd)
	}
}

// TestInternLabels: pods with the same labels share one map (and one copy
// of each string), and a label set no pod holds any more is forgotten.
func TestInternLabels(t *testing.T) {
	a, b := apiPod("a"), apiPod("b")
	a.Labels = map[string]string{"app": "web", "pod-template-hash": "5d8f"}
	b.Labels = map[string]string{"pod-template-hash": "5d8f", "app": "web"}
	sa, _ := slim(a, keep{})
	sb, _ := slim(b, keep{})
	pa, pb := sa.(*Pod), sb.(*Pod)
	if reflect.ValueOf(pa.Labels).Pointer() != reflect.ValueOf(pb.Labels).Pointer() {
		t.Error("two pods with the same labels hold two maps")
	}
	if pa.Labels["app"] != "web" || len(pa.Labels) != 2 {
		t.Errorf("labels %v", pa.Labels)
	}
	key := "once\x00" + t.Name() + "\x00"
	func() {
		c := apiPod("c")
		c.Labels = map[string]string{"once": t.Name()}
		if _, err := slim(c, keep{}); err != nil {
			t.Fatal(err)
		}
	}()
	labelSets.Lock()
	_, held := labelSets.byKey[key]
	labelSets.Unlock()
	if !held {
		t.Fatalf("no label set %q after slim", key)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		labelSets.Lock()
		_, held := labelSets.byKey[key]
		labelSets.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the label set of a pod that is gone is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(pa)
	runtime.KeepAlive(pb)
}

// TestSlimLocal: a pod of the cache's node keeps its UID and every
// annotation (the pod API's), a pod of another node neither; a node
// keeps the annotations asked for, none else.
func TestSlimLocal(t *testing.T) {
	k := keep{node: "n1"}
	mine := apiPod("mine")
	mine.UID = "u-mine"
	theirs := apiPod("theirs")
	theirs.UID, theirs.Spec.NodeName = "u-theirs", "n2"
	pending := apiPod("pending")
	pending.Spec.NodeName = ""
	got, _ := slim(mine, k)
	if l := got.(*Pod).Local; l == nil || l.UID != "u-mine" || !reflect.DeepEqual(l.Annotations, mine.Annotations) {
		t.Errorf("this node's pod keeps %+v, want its UID and annotations %v", l, mine.Annotations)
	}
	for _, p := range []*corev1.Pod{theirs, pending} {
		if got, _ := slim(p, k); got.(*Pod).Local != nil {
			t.Errorf("pod %s of node %q keeps %+v, want nothing of it", p.Name, p.Spec.NodeName, got.(*Pod).Local)
		}
	}
	if got, _ := slim(mine, keep{}); got.(*Pod).Local != nil {
		t.Error("a cache of no node keeps a pod's UID and annotations")
	}
	no, _ := slim(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{"other": "y"}}},
		keep{nodeAnnotations: []string{"lease/backend-data"}})
	if a := no.(*Node).Annotations; a != nil {
		t.Errorf("a node without the annotations asked for keeps %v", a)
	}
}
