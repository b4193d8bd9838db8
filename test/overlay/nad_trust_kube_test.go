//go:build kube

package overlay

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/kube"
)

// TestKubeNADTrust is the trust model of NetworkAttachmentDefinitions
// (docs/security.md) end to end: a real API server, cnibox-agent's pod API,
// multi ADD through libcni. The NADs of namespace team-a, which the agent
// does not trust, get in-pod networks (a macvlan on a link of the pod's
// own, not its eth0, with host-local addresses); issue 48's macvlan on
// the pod's eth0 is refused naming linkInContainer;
// one that names a file of the node (resolvConf, spelt as encoding/json
// would still take it) or a bridge of the node is refused with error 7
// naming the field and the flag, and the file's text never comes back;
// with --nad-trusted-namespaces=team-a both are served.
func TestKubeNADTrust(t *testing.T) {
	cniboxBin, agentBin := binaries(t)
	cs, kubeconfig := kube.Client(t)
	ctx := context.Background()
	const node = "nt-node"
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{})
	must(t, err)

	const secret = "nameserver-secret-of-the-node"
	resolv := filepath.Join(t.TempDir(), "shadow")
	must(t, os.WriteFile(resolv, []byte("root:"+secret+":19000::::::\nnameserver 10.79.9.9\n"), 0o600))
	// A macvlan on lower0, a veth whose both ends are in the pod: an
	// in-pod network that every kernel here has (this machine's has no
	// dummy). (A macvlan on the pod's own eth0, the primary's veth into
	// the node, is refused since issue 48: it sends into the node as the
	// pod with addresses of its choosing.)
	inPod := `"type":"macvlan","linkInContainer":true,"master":"lower0","mode":"bridge"`
	installNAD(t, cs, "team-a", "own", `{"cniVersion":"1.0.0","name":"own",`+inPod+`,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.79.1.0/24"}]]}}`)
	installNAD(t, cs, "team-a", "reads", `{"cniVersion":"1.0.0","name":"reads",`+inPod+`,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.79.2.0/24"}]],"ResolvConf":"`+resolv+`"}}`)
	installNAD(t, cs, "team-a", "br", `{"cniVersion":"1.0.0","name":"br","plugins":[`+mkBridge("nt-br", "10.79.3.0/24", "")+`]}`)
	// issue 48's reproduction: eth0 (no master), passthru, the bridge's address.
	installNAD(t, cs, "team-a", "spoof", `{"cniVersion":"1.0.0","name":"spoof","type":"macvlan","linkInContainer":true,"mode":"passthru",`+
		`"ipam":{"type":"static","addresses":[{"address":"10.79.0.1/32"}]}}`)

	binDir := t.TempDir()
	if out, err := exec.Command(cniboxBin, "install", "--dir", binDir).CombinedOutput(); err != nil {
		t.Fatalf("cnibox install: %v\n%s", err, out)
	}
	t.Setenv("CNIBOX_DATA_DIR", t.TempDir())
	sock := filepath.Join(t.TempDir(), "agent.sock")
	conflist := `{"cniVersion":"1.0.0","name":"nt","plugins":[{"type":"multi","kubernetes":true,"agentSocket":"` + sock + `",
		"delegates":[{"name":"primary","type":"bridge","bridge":"nt-pri","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.79.0.0/24"}]]}}]}]}`
	list, err := libcni.ConfListFromBytes([]byte(conflist))
	must(t, err)
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
	add := func(name, networks string) (string, error) {
		uid := createPod(t, cs, node, name, networks)
		ns := nstest.NewNS(t, name)
		h, err := netops.Open(ns)
		must(t, err)
		_, _, err = h.EnsureVeth(netops.VethOpts{HostName: "lower0", PeerName: "lower1", Peer: h})
		h.Close()
		must(t, err)
		rt := &libcni.RuntimeConf{ContainerID: name, NetNS: ns, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", uid}}}
		_, err = cni.AddNetworkList(ctx, list, rt)
		if err == nil {
			t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		}
		return ns, err
	}

	stop := startPodAPI(t, agentBin, kubeconfig, node, sock, "kube-system")
	ns, err := add("nt-own", "team-a/own")
	if err != nil {
		t.Fatalf("ADD with team-a/own (an in-pod macvlan on lower0 with host-local addresses): %v", err)
	}
	if l := podLinks(t, ns); !l["eth0"] || !l["net1"] {
		t.Errorf("pod nt-own links %v; want eth0 and net1", l)
	}
	for _, tc := range []struct{ pod, nad, field string }{
		{"nt-reads", "team-a/reads", "ipam.ResolvConf"},
		{"nt-br", "team-a/br", "plugins[0].type"},
		{"nt-spoof", "team-a/spoof", "linkInContainer"},
	} {
		ns, err := add(tc.pod, tc.nad)
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "field "+tc.field+" ") ||
			!strings.Contains(err.Error(), "--nad-trusted-namespaces=kube-system,team-a)") || strings.Contains(err.Error(), secret) {
			t.Errorf("ADD with %s = %v; want error 7 naming %s and the flag, never the file's text", tc.nad, err, tc.field)
		}
		if l := podLinks(t, ns); l["eth0"] || l["net1"] {
			t.Errorf("pod %s links after the refused ADD: %v", tc.pod, l)
		}
	}

	stop()
	startPodAPI(t, agentBin, kubeconfig, node, sock, "kube-system,team-a")
	for _, nad := range []string{"team-a/reads", "team-a/br"} {
		name := "nt-trusted-" + strings.TrimPrefix(nad, "team-a/")
		if ns, err := add(name, nad); err != nil {
			t.Errorf("ADD with %s, team-a trusted: %v", nad, err)
		} else if l := podLinks(t, ns); !l["net1"] {
			t.Errorf("pod %s links %v; want net1", name, l)
		}
	}
}
