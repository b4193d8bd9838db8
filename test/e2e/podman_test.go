package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
)

// podman is podman 4.3 with the CNI backend and a private configuration:
// nothing global is read or written (see test-env-notes).
type podman struct {
	t   *testing.T
	dir string
	env []string
}

func newPodman(t *testing.T, pluginDir, confDir string) *podman {
	t.Helper()
	nstest.RequireProgram(t, "podman", "podman")
	dir := t.TempDir()
	// The default rlimits fail without CAP_SYS_RESOURCE: ask for what we have.
	var lim syscall.Rlimit
	must(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	hard := strconv.FormatUint(lim.Max, 10)
	// No static_dir: the database stays podman's default, <graphroot>/libpod.
	// The exit command conmon runs when a container ends (podman container
	// cleanup, which tears its network down) gets --root, which puts it
	// there; with another static_dir it never found the container, and
	// every podman run --rm waited out podman's 20 s conmon timeout before
	// it did the cleanup itself. conmon hands that command CONTAINERS_CONF
	// but not the rest of the test's environment: [engine] env gives it
	// the CNIBOX_ variables (the store, the log file), which the plugins'
	// DEL must see as their ADD did.
	var cniboxEnv []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CNIBOX_") {
			cniboxEnv = append(cniboxEnv, strconv.Quote(kv))
		}
	}
	conf := fmt.Sprintf(`[network]
network_backend = "cni"
cni_plugin_dirs = [%q]
network_config_dir = %q
default_network = "cnibox-undefined"

[engine]
env = [%s]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
lock_type = "file"
tmp_dir = %q
volume_path = %q

[containers]
default_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]
log_driver = "k8s-file"
`, pluginDir, confDir, strings.Join(cniboxEnv, ", "), filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes"), hard, hard)
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\nrunroot = %q\ngraphroot = %q\n", filepath.Join(dir, "run"), filepath.Join(dir, "graph"))
	must(t, os.WriteFile(filepath.Join(dir, "containers.conf"), []byte(conf), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "storage.conf"), []byte(storage), 0o644))
	p := &podman{t: t, dir: dir, env: append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "xdg"),
	)}
	t.Cleanup(func() {
		p.run("rm", "-a", "-f", "-t", "0")
		p.run("system", "reset", "-f")
	})
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (p *podman) run(args ...string) (string, error) {
	cmd := exec.Command("podman", args...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (p *podman) mustRun(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// importBusybox builds a one-binary image from Debian's static busybox.
func (p *podman) importBusybox(name string) {
	p.t.Helper()
	root := filepath.Join(p.dir, "rootfs")
	must(p.t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		p.t.Fatalf("busybox-static is not installed (make deps installs it): %v", err)
	}
	must(p.t, os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755))
	for _, applet := range []string{"sh", "httpd", "wget", "ping", "ip", "sleep", "cat", "timeout", "echo", "mkdir"} {
		must(p.t, os.Symlink("busybox", filepath.Join(root, "bin", applet)))
	}
	for _, d := range []string{"etc", "proc", "sys", "dev", "tmp", "www"} {
		must(p.t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(p.t, os.WriteFile(filepath.Join(root, "www", "index.html"), []byte("hello from cnibox\n"), 0o644))
	tarball := filepath.Join(p.dir, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarball, ".").CombinedOutput(); err != nil {
		p.t.Fatalf("tar: %v\n%s", err, out)
	}
	p.mustRun("import", "--change", `CMD ["/bin/sh"]`, tarball, name)
}

// TestPodman: two busybox containers on a cnibox network reach each other;
// their addresses are released after podman rm.
func TestPodman(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	e := newEnv(t)
	confDir := t.TempDir()
	conflist := `{"cniVersion":"1.0.0","name":"podnet","plugins":[
	  {"type":"bridge","bridge":"cbxpodman","isGateway":true,"ipMasq":true,"hairpinMode":true,
	   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.89.3.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
	  {"type":"loopback"}]}`
	must(t, os.WriteFile(filepath.Join(confDir, "podnet.conflist"), []byte(conflist), 0o644))
	p := newPodman(t, e.binDir, confDir)
	p.importBusybox("localhost/cnibox-busybox")

	p.mustRun("run", "-d", "--name", "web", "--network", "podnet", "localhost/cnibox-busybox", "httpd", "-f", "-p", "80", "-h", "/www")
	ip := p.mustRun("inspect", "-f", "{{.NetworkSettings.Networks.podnet.IPAddress}}", "web")
	addr, err := netip.ParseAddr(ip)
	if err != nil || !netip.MustParsePrefix("10.89.3.0/24").Contains(addr) {
		t.Fatalf("web container address %q: want one in 10.89.3.0/24", ip)
	}
	var out string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err = p.run("run", "--rm", "--network", "podnet", "localhost/cnibox-busybox",
			"timeout", "5", "wget", "-q", "-O", "-", "http://"+ip+"/")
		if (err == nil && strings.Contains(out, "hello from cnibox")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out, "hello from cnibox") {
		t.Fatalf("the second container could not fetch from web at %s: %v\n%s", ip, err, out)
	}
	if got := len(e.reservations("podnet")); got != 1 {
		t.Errorf("reservations while web runs = %d, want 1", got)
	}
	p.mustRun("rm", "-f", "-t", "0", "web")
	if got := e.reservations("podnet"); len(got) != 0 {
		t.Errorf("reservations after podman rm: %v", got)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths after podman rm: %v", got)
	}
}
