package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testRef is the name the import test gives the image.
const testRef = "ghcr.io/cnibox/cnibox:import-test"

// buildBinaries returns cnibox and both agents: make build's, beside
// $CNIBOX_BIN (make test builds them before the tests), else built into
// dir as make build builds them.
func buildBinaries(t *testing.T, dir string) []string {
	t.Helper()
	builds := []struct{ out, tags, pkg string }{
		{"cnibox", "urfave_cli_no_docs", "github.com/cnibox/cnibox"},
		{"cnibox-agent", "nokube", "github.com/cnibox/cnibox/cmd/cnibox-agent"},
		{"cnibox-agent-kube", "", "github.com/cnibox/cnibox/cmd/cnibox-agent"},
	}
	var paths []string
	for _, b := range builds {
		out := filepath.Join(dir, b.out)
		if src := os.Getenv("CNIBOX_BIN"); src != "" {
			if made := filepath.Join(filepath.Dir(src), b.out); fileExists(made) {
				paths = append(paths, made)
				continue
			}
		}
		paths = append(paths, out)
		cmd := exec.Command("go", "build", "-trimpath", "-tags", b.tags, "-ldflags", "-s -w -X main.version=import-test", "-o", out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, msg)
		}
	}
	return paths
}

// TestImport builds the image archive from the binaries and loads it into
// a private containerd (ctr images import, then ctr run) and a private
// podman (podman load, and podman pull docker-archive: for the Docker-style
// manifest.json): both name it testRef, and the binaries run in it.
func TestImport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs containerd and podman")
	}
	for _, tool := range []string{"containerd", "ctr", "podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make deps installs it): %v", tool, err)
		}
	}
	dir := t.TempDir()
	bins := buildBinaries(t, dir)
	archive := filepath.Join(dir, "cnibox-image.tar")
	stdout, err := runTool(t, append([]string{"-o", archive, "-ref", testRef, "-epoch", "1700000000", "-busybox", busyboxBin}, bins...)...)
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command(bins[0], "version").Output()
	if err != nil {
		t.Fatalf("cnibox version: %v", err)
	}

	t.Run("containerd", func(t *testing.T) {
		ctr := startContainerd(t)
		ctr.mustRun("images", "import", archive)
		// named by its tag and by its digest, the rendered manifests'
		// reference (the kubelet finds it without a registry)
		dgst := regexp.MustCompile(`\(index (sha256:[0-9a-f]{64})\)`).FindStringSubmatch(stdout)
		if dgst == nil {
			t.Fatalf("no index digest in %s", stdout)
		}
		byDigest := strings.TrimSuffix(testRef, ":import-test") + "@" + dgst[1]
		if out := ctr.mustRun("images", "ls", "-q"); !strings.Contains(out, testRef) || !strings.Contains(out, byDigest) {
			t.Errorf("ctr images ls: %q, want %s and %s", out, testRef, byDigest)
		}
		if out := ctr.mustRun("run", "--rm", byDigest, "digest-test", "/usr/local/bin/cnibox", "version"); out != strings.TrimSpace(string(want)) {
			t.Errorf("cnibox version in the image by digest: %q, want %q", out, want)
		}
		if out := ctr.mustRun("run", "--rm", testRef, "version-test", "/usr/local/bin/cnibox", "version"); out != strings.TrimSpace(string(want)) {
			t.Errorf("cnibox version in the image: %q, want %q", out, want)
		}
		for _, agent := range []string{"cnibox-agent", "cnibox-agent-kube"} {
			if out := ctr.mustRun("run", "--rm", testRef, agent+"-test", "/usr/local/bin/"+agent, "--version"); !strings.HasPrefix(out, "cnibox-agent ") {
				t.Errorf("%s --version in the image: %q", agent, out)
			}
		}
		// kube-flannel.yml's init containers, with the host dirs they mount
		host := t.TempDir()
		for _, d := range []string{"bin", "net.d", "cfg"} {
			if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		conf := `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel"}]}`
		if err := os.WriteFile(filepath.Join(host, "cfg", "cni-conf.json"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		mount := func(src, dst string) string {
			return "--mount=type=bind,src=" + filepath.Join(host, src) + ",dst=" + dst + ",options=rbind:rw"
		}
		ctr.mustRun("run", "--rm", mount("bin", "/opt/cni/bin"), testRef, "install-cni-plugin", "cp", "-f", "/flannel", "/opt/cni/bin/flannel")
		ctr.mustRun("run", "--rm", mount("net.d", "/etc/cni/net.d"), mount("cfg", "/etc/kube-flannel"), testRef, "install-cni",
			"/opt/bin/install-conf", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist")
		if got, err := os.ReadFile(filepath.Join(host, "net.d", "10-flannel.conflist")); err != nil || string(got) != conf {
			t.Errorf("install-conf wrote %q %v, want the ConfigMap's conflist", got, err)
		}
		// the copy is cnibox, and its name makes it the flannel role (its
		// version is the build's: import-test, or make's with $CNIBOX_BIN)
		cmd := exec.Command(filepath.Join(host, "bin", "flannel"))
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), `"supportedVersions"`) {
			t.Errorf("the installed flannel plugin, CNI_COMMAND=VERSION: %v %s", err, out)
		}
		if got, err := exec.Command(filepath.Join(host, "bin", "flannel"), "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(got), "CNI flannel plugin ") || !strings.Contains(string(got), "+cnibox.") {
			t.Errorf("the installed flannel plugin is not cnibox's flannel role: %v %s", err, got)
		}
		if out := ctr.mustRun("run", "--rm", testRef, "flanneld-test", "/opt/bin/flanneld", "--version"); !strings.HasPrefix(out, "cnibox-agent ") {
			t.Errorf("/opt/bin/flanneld --version in the image: %q", out)
		}
	})
	t.Run("podman", func(t *testing.T) {
		p := newPodman(t)
		if out := p.mustRun("load", "-i", archive); !strings.Contains(out, testRef) {
			t.Errorf("podman load: %q, want it to name %s", out, testRef)
		}
		if out := p.mustRun("images", "--format", "{{.Repository}}:{{.Tag}}"); !strings.Contains(out, testRef) {
			t.Errorf("podman images: %q, want %s", out, testRef)
		}
		cmd := p.mustRun("image", "inspect", "--format", "{{json .Config.Cmd}}", testRef)
		if cmd != `["/usr/local/bin/cnibox","version"]` {
			t.Errorf("the image's command: %s", cmd)
		}
		p.mustRun("rmi", testRef)
		// The Docker-style manifest.json, as docker load reads it.
		p.mustRun("pull", "docker-archive:"+archive)
		if out := p.mustRun("images", "--format", "{{.Repository}}:{{.Tag}}"); !strings.Contains(out, testRef) {
			t.Errorf("podman images after loading the docker-archive: %q, want %s", out, testRef)
		}
	})
}

// ctrClient runs ctr against a private containerd.
type ctrClient struct {
	t       *testing.T
	address string
}

func (c ctrClient) run(args ...string) (string, error) {
	full := append([]string{"--address", c.address, "--namespace", "cnibox-image-test"}, args...)
	out, err := exec.Command("ctr", full...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (c ctrClient) mustRun(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// startContainerd runs containerd with its own root, state and socket
// (no CRI) until the test ends.
func startContainerd(t *testing.T) ctrClient {
	t.Helper()
	dir := t.TempDir()
	c := ctrClient{t: t, address: filepath.Join(dir, "containerd.sock")}
	conf := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"+
		"[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.address, c.address+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log:\n%s", log)
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.run("version"); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer within 15 s")
		}
	}
}

// podman is podman with a private configuration: nothing global is read
// or written.
type podman struct {
	t   *testing.T
	env []string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"cni", "net.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The default rlimits fail without CAP_SYS_RESOURCE: ask for what we have.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	hard := strconv.FormatUint(lim.Max, 10)
	conf := fmt.Sprintf("[network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [%q]\nnetwork_config_dir = %q\n"+
		"[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nlock_type = \"file\"\n"+
		"tmp_dir = %q\nvolume_path = %q\nstatic_dir = %q\n"+
		"[containers]\ndefault_ulimits = [\"nofile=%s:%s\", \"nproc=32768:32768\"]\nlog_driver = \"k8s-file\"\n",
		filepath.Join(dir, "cni"), filepath.Join(dir, "net.d"),
		filepath.Join(dir, "tmp"), filepath.Join(dir, "volumes"), filepath.Join(dir, "static"), hard, hard)
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\nrunroot = %q\ngraphroot = %q\n", filepath.Join(dir, "run"), filepath.Join(dir, "graph"))
	for name, content := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &podman{t: t, env: append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "xdg"),
	)}
	t.Cleanup(func() { p.run("system", "reset", "-f") })
	return p
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

// fileExists reports whether path is a regular file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
