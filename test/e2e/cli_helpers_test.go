package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

// cliRun runs `cnibox args...` the way an operator does on the node: in the
// test's node namespace, with the same CNIBOX_DATA_DIR and CNIBOX_LOG_FILE
// as the plugins. It returns stdout, stderr and the exit code.
func (e *env) cliRun(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	var extra []*os.File
	if len(args) > 0 && args[0] == "doctor" && !slices.Contains(args, "--node-netns") {
		// The test's namespace stands for the node (main_test.go), not
		// PID 1's: doctor's namespace check compares with it.
		ns := ownNetns(e.t)
		extra = append(extra, ns)
		args = append(args, "--node-netns", "/proc/self/fd/3")
	}
	cmd := exec.Command(cniboxBin(e.t), args...)
	cmd.ExtraFiles = extra
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("cnibox %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// cliJSON runs `cnibox args... --json`, wants exit code want, and decodes
// stdout into v.
func (e *env) cliJSON(v any, want int, args ...string) string {
	e.t.Helper()
	out, errs, code := e.cliRun(append(args, "--json")...)
	if code != want {
		e.t.Fatalf("cnibox %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, out, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		e.t.Fatalf("cnibox %v --json: %v\n%s", args, err, out)
	}
	return out
}

// withT returns the env for a subtest, so that its helpers fail the subtest.
func (e *env) withT(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// confDir makes a CNI config directory holding the given files.
func (e *env) confDir(files map[string]string) string {
	e.t.Helper()
	dir := e.t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	return dir
}

// newPodOwnNS is newPod with a namespace the test may delete itself (to
// make a pod vanish without DEL); it returns the pod and a function that
// deletes the namespace.
func (e *env) newPodOwnNS(name string) (*pod, func()) {
	e.t.Helper()
	podSeq++
	nsName := fmt.Sprintf("e2e-own-%d-%d", os.Getpid(), podSeq)
	path, err := netops.CreateNamedNS(nsName)
	if err != nil {
		e.t.Fatal(err)
	}
	gone := func() {
		if err := netops.DeleteNamedNS(nsName); err != nil {
			e.t.Errorf("delete namespace %s: %v", nsName, err)
		}
	}
	e.t.Cleanup(gone)
	nstest.SetBaseSysctls(e.t, path)
	id := fmt.Sprintf("%s-%d-%d", name, os.Getpid(), podSeq)
	return &pod{id: id, netns: path, rt: &libcni.RuntimeConf{
		ContainerID: id, NetNS: path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}},
	}}, gone
}

// waitLinkGone waits until the node has no link called name: the kernel
// removes the veths of a deleted namespace in the background.
func waitLinkGone(t *testing.T, name string) {
	t.Helper()
	h := hostHandle(t)
	// The kernel destroys a deleted namespace's devices from one work
	// queue (cleanup_net), one batch after another, each waiting for RCU:
	// with the other tests' namespaces going at the same time on a loaded
	// machine that took over 5 s here. Generous, as the house asks.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		if _, err := h.LinkByName(name); errors.Is(err, netops.ErrNotFound) {
			return
		}
	}
	t.Fatalf("link %s is still on the node 60 s after its pod's namespace was deleted", name)
}

// hasLink reports whether the node has a link called name.
func hasLink(t *testing.T, name string) bool {
	t.Helper()
	_, err := hostHandle(t).LinkByName(name)
	return err == nil
}

// pinBridgeMAC creates the bridge if needed and gives it a MAC of its own.
// A bridge without one takes the lowest MAC of its ports and changes it when
// that port leaves; the other pods then send to the old MAC until their
// neighbour entry of the gateway expires (doctor reports exactly that), which
// would make "the other pod stays healthy" depend on random MACs.
func pinBridgeMAC(t *testing.T, name string) {
	t.Helper()
	h := hostHandle(t)
	if _, err := h.EnsureBridge(bridgeOpts(name)); err != nil {
		t.Fatal(err)
	}
	if err := h.SetMAC(name, net.HardwareAddr{0x02, 0xcb, 0x0c, 0x11, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
}

// ownNetns is the namespace that stands for the node, as a file to hand
// to a child as a descriptor (--node-netns /proc/self/fd/3): the one
// TestMain's process started in. Not /proc/PID/ns/net: that is the
// namespace of the process's first thread. nstest enters a pod's
// namespace on a locked thread and lets its goroutine end without
// unlocking, so the runtime ends the thread; when that thread is the
// first one, the runtime cannot end it and parks it for good instead,
// still in the pod's namespace (no goroutine runs on it again, so nothing
// runs in the wrong namespace, but /proc/PID/ns/net names the pod's).
func ownNetns(t testing.TB) *os.File {
	t.Helper()
	if nodeNetns == nil {
		t.Fatal("TestMain did not open the node's namespace")
	}
	return nodeNetns
}
