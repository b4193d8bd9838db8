//go:build kube

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cnibox/cnibox/internal/testenv"
)

// criNode is the node of test/kube/node.sh's cri mode: containerd alone in
// private namespaces, its CRI driven by the test as the kubelet would.
type criNode struct {
	*node
	rt runtimeapi.RuntimeServiceClient
}

// startCRINode writes the CNI directories containerd reads (conflist as the
// one network config; cnibox, from $CNIBOX_BIN or make build's bin/cnibox,
// with links for roles), imports the busybox image as the sandbox image,
// starts the node in cri mode and connects to its CRI socket. The cleanup
// is the real-node test's: every process of the node killed, the
// containers' cgroups removed.
func startCRINode(t *testing.T, conflist string, roles ...string) *criNode {
	if !testenv.Root() {
		t.Skip("the real-node test runs as root (namespaces, mounts, containerd)")
	}
	cnibox := os.Getenv("CNIBOX_BIN")
	if cnibox == "" {
		cnibox = "../../bin/cnibox"
	}
	n := &node{t: t, dir: t.TempDir()}
	bin, conf := n.hostDir("/opt/cni/bin"), n.hostDir("/etc/cni/net.d")
	for _, d := range []string{bin, conf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, cnibox, filepath.Join(bin, "cnibox"), 0o755)
	for _, r := range roles {
		if err := os.Symlink("cnibox", filepath.Join(bin, r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(conf, "10-kindnet.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}

	n = launch(t, n.dir, "", "cri", "NODE_NAME="+nodeName, "NODE_IP="+nodeIP)
	t.Cleanup(func() { criDiagnose(n) })

	bb := filepath.Join(n.dir, "busybox.tar")
	writeBusyboxImage(t, bb, busyboxRef)
	n.ctr("images", "import", bb)

	conn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "containerd.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &criNode{node: n, rt: runtimeapi.NewRuntimeServiceClient(conn)}
	c.poll("the CRI reports the network ready", func() error {
		st, err := c.rt.Status(c.ctx(), &runtimeapi.StatusRequest{})
		if err != nil {
			return err
		}
		for _, cond := range st.GetStatus().GetConditions() {
			if cond.Type == runtimeapi.NetworkReady && !cond.Status {
				return fmt.Errorf("NetworkReady=false: %s: %s", cond.Reason, cond.Message)
			}
		}
		return nil
	})
	return c
}

// criDiagnose logs, when the test failed, the tails of node.sh's and
// containerd's logs (containerd logs every CNI call's error).
func criDiagnose(n *node) {
	if !n.t.Failed() {
		return
	}
	for _, f := range []string{"node.out", "containerd.log"} {
		data, _ := os.ReadFile(filepath.Join(n.dir, f))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		n.t.Logf("%s (last 60 lines):\n%s", f, strings.Join(lines[max(0, len(lines)-60):], "\n"))
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatalf("%v (make build, or set CNIBOX_BIN)", err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// ctx is the context of one CRI call: bounded by the test's wait.
func (c *criNode) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), c.wait())
	c.t.Cleanup(cancel)
	return ctx
}

// sandbox is a pod sandbox the test ran through the CRI.
type sandbox struct {
	name, id string
	ip       string
	netns    string // its network namespace, as the host reaches it
}

// runSandbox runs a pod sandbox (default/name, its hostname name) with the
// port mappings given, as the kubelet does for a pod, and returns it with
// the address the CRI reports and its network namespace.
func (c *criNode) runSandbox(name string, ports ...*runtimeapi.PortMapping) sandbox {
	c.t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Hostname:     name,
		LogDirectory: filepath.Join(c.dir, "pod-logs", name),
		PortMappings: ports,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD},
		}},
	}
	r, err := c.rt.RunPodSandbox(c.ctx(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		c.t.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	s := sandbox{name: name, id: r.PodSandboxId}
	st, err := c.rt.PodSandboxStatus(c.ctx(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.id, Verbose: true})
	if err != nil {
		c.t.Fatalf("PodSandboxStatus %s: %v", name, err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		c.t.Fatalf("sandbox %s is %s, want ready", name, st.Status.State)
	}
	s.ip = st.Status.GetNetwork().GetIp()
	// containerd's verbose info: the sandbox's runtime spec names the
	// network namespace it created (under the node's private /run).
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		c.t.Fatalf("sandbox %s: verbose info: %v\n%s", name, err, st.Info["info"])
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			// resolved on the node: /var/run is a link to /run, which
			// the host would resolve against its own root
			p, err := c.onNode("readlink", "-f", ns.Path)
			if err != nil {
				c.t.Fatalf("sandbox %s: readlink -f %s on the node: %v", name, ns.Path, err)
			}
			s.netns = fmt.Sprintf("/proc/%d/root%s", c.init, strings.TrimSpace(p))
		}
	}
	if s.netns == "" {
		c.t.Fatalf("sandbox %s: no network namespace path in its runtime spec:\n%s", name, st.Info["info"])
	}
	return s
}

// removeSandbox stops a sandbox twice and removes it, as the kubelet does
// when a pod is deleted (it stops the pod, then its garbage collection
// stops and removes the sandbox). containerd 1.6 runs the CNI DEL on each
// of the three calls, the last two with the namespace gone (no CNI_NETNS).
func (c *criNode) removeSandbox(s sandbox) {
	c.t.Helper()
	for range 2 {
		if _, err := c.rt.StopPodSandbox(c.ctx(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.id}); err != nil {
			c.t.Fatalf("StopPodSandbox %s: %v", s.name, err)
		}
	}
	if _, err := c.rt.RemovePodSandbox(c.ctx(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.id}); err != nil {
		c.t.Fatalf("RemovePodSandbox %s: %v", s.name, err)
	}
	l, err := c.rt.ListPodSandbox(c.ctx(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range l.Items {
		if p.Id == s.id {
			c.t.Fatalf("sandbox %s still listed after RemovePodSandbox: %v", s.name, p)
		}
	}
}

// uplinkNS is the network namespace of the node's uplink (the other end of
// its eth0, another host as far as the node can tell): node.sh holds it
// with `sleep infinity` in a namespace of its own.
func (c *criNode) uplinkNS() string {
	c.t.Helper()
	nodeNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", c.init))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, pid := range c.namespaceProcs() {
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		net, _ := os.Readlink("/proc/" + pid + "/ns/net")
		if string(cmd) == "sleep\x00infinity\x00" && net != "" && net != nodeNet {
			return "/proc/" + pid + "/ns/net"
		}
	}
	c.t.Fatal("no uplink namespace (node.sh's unshare --net sleep infinity)")
	return ""
}

// nodeNS is the node's network namespace.
func (c *criNode) nodeNS() string { return fmt.Sprintf("/proc/%d/ns/net", c.init) }
