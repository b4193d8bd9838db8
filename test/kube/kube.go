// Package kube starts this directory's control plane (control-plane.sh:
// etcd, kube-apiserver, the node IPAM controller) for a test, on the
// loopback of the namespace the test runs in. Its ports are fixed: Start
// holds /tmp/cnibox-kube-ports.lock until the test ends, so tests of two
// packages that one `go test` runs at once take turns (a wrapper around
// the whole run holds /tmp/cnibox-kube.lock, another file, against the
// real-node harness and the benches).
package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Script is $KCP_SCRIPT, else control-plane.sh of the repository the test
// runs in (found from its directory up).
func Script(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KCP_SCRIPT"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "test", "kube", "control-plane.sh")
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("control-plane.sh: no go.mod above the test's directory (set $KCP_SCRIPT)")
		}
		dir = up
	}
}

// Start starts the control plane in a directory of the test's (args follow
// the directory on the script's command line: cluster CIDR and node mask;
// env is added to the script's environment), stops it when the test ends,
// and returns the admin's kubeconfig in that directory.
func Start(t testing.TB, env []string, args ...string) (kubeconfig string) {
	t.Helper()
	script := Script(t)
	portLock(t)
	dir := t.TempDir()
	cmd := exec.Command("bash", append([]string{script, "start", dir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { exec.Command("bash", script, "stop", dir).Run() })
	if err != nil {
		t.Fatalf("start the control plane: %v\n%s", err, out)
	}
	return filepath.Join(dir, "kubeconfig")
}

// portLock takes /tmp/cnibox-kube-ports.lock for the rest of the test,
// waiting while another process's test holds it (a cleanup registered
// before Start's stop runs after it: the lock outlives the control plane).
func portLock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/tmp/cnibox-kube-ports.lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock the control plane's ports: %v", err)
	}
	t.Cleanup(func() { f.Close() })
}

// Clientset is a client of kubeconfig's cluster, QPS and burst 500 (tests
// that create hundreds of objects).
func Clientset(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 500, 500
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Client starts the control plane with the script's defaults (Start) and
// returns a Clientset of its admin and the kubeconfig.
func Client(t testing.TB) (kubernetes.Interface, string) {
	t.Helper()
	kc := Start(t, nil)
	return Clientset(t, kc), kc
}

// CreateCRD creates the CustomResourceDefinition doc (YAML or JSON; one that
// exists already is kept) and waits, up to a minute, until list, the path
// of a list of its resources (/apis/GROUP/VERSION/[namespaces/NS/]PLURAL),
// is served.
func CreateCRD(t testing.TB, cs kubernetes.Interface, doc []byte, list string) {
	t.Helper()
	body, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := cs.CoreV1().RESTClient()
	err = rc.Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the CRD of %s: %v", list, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := rc.Get().AbsPath(list).Do(ctx).Error()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD of %s is not served: %v", list, err)
		}
	}
}
