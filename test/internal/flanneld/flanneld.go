// Package flanneld builds flannel's own node agent, flanneld, at the release
// cnibox-agent is compared with (Version), so that tests and benches can run
// a flanneld node beside a cnibox node. It is built once per version from
// the Go module proxy into the user's cache,
// os.UserCacheDir()/cnibox-flannel/VERSION, together with flannel's
// install-conf and the flannel CNI plugin (the layout test/node's image
// uses), in the caller's own network namespace: call it before entering a
// private namespace that has no way out.
//
// flannel's tencentvpc backend needs an SDK that is not on the module
// proxy, so flanneld is built from a copy of the module's source with that
// backend's import dropped from main.go; and without cgo, which makes it
// static (it runs in the test-kernel guest): on amd64 flannel's udp backend
// needs cgo, so its import is dropped too (cnibox refuses udp anyway).
package flanneld

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the flannel release the side-by-side tests use.
const Version = "v0.28.9"

const (
	module = "github.com/flannel-io/flannel"
	// flannel-io/cni-plugin is not on the module proxy; its flannel plugin
	// is the one containernetworking/plugins shipped until v0.9.1.
	cniModule = "github.com/containernetworking/plugins/plugins/meta/flannel@v0.9.1"
)

// dropImports are main.go's backend imports the build leaves out.
var dropImports = []string{
	`_ "github.com/flannel-io/flannel/pkg/backend/tencentvpc"`,
	`_ "github.com/flannel-io/flannel/pkg/backend/udp"`,
}

// DirEnv names a directory that already holds flanneld (make test-kernel
// copies it into the guest); when it is set, Dir builds nothing.
const DirEnv = "CNIBOX_FLANNELD_DIR"

// Dir returns the directory holding flanneld, install-conf and flannel (the
// CNI plugin) of Version, building them the first time.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the user's cache directory: %w", err)
	}
	dir := filepath.Join(cache, "cnibox-flannel", Version)
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "flanneld: building flanneld %s into %s (once; it needs the Go module proxy)\n", Version, dir)
	out := filepath.Join(tmp, "out")
	if err := build(tmp, out); err != nil {
		return "", err
	}
	// A rename: another run sees all of it or none of it.
	if err := os.Rename(out, dir); err != nil && !complete(dir) {
		return "", err
	}
	return dir, nil
}

// Binary returns the path of flanneld, building it the first time.
func Binary() (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "flanneld"), nil
}

func complete(dir string) bool {
	for _, f := range []string{"flanneld", "install-conf", "flannel"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// goCmd runs go with args in wd, outside any workspace or module of the
// caller, and returns its stdout.
func goCmd(wd string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), append([]string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(b), nil
}

// moduleDir is flannel's module at Version in the module cache (downloaded
// from the proxy the first time), read-only.
func moduleDir(wd string) (string, error) {
	js, err := goCmd(wd, nil, "mod", "download", "-json", module+"@"+Version)
	if err != nil {
		return "", err
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(js), &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no directory (%v)", module, Version, err)
	}
	return mod.Dir, nil
}

// ChartDir is flannel's own Helm chart of Version (chart/kube-flannel in
// its module), as released: read it, do not write it.
func ChartDir() (string, error) {
	dir, err := moduleDir(os.TempDir())
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "chart", "kube-flannel"), nil
}

func build(tmp, out string) error {
	modDir, err := moduleDir(tmp)
	if err != nil {
		return err
	}
	src := filepath.Join(tmp, "flannel")
	if err := os.CopyFS(src, os.DirFS(modDir)); err != nil {
		return err
	}
	if err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			err = os.Chmod(p, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
		}
		return err
	}); err != nil {
		return err
	}
	main := filepath.Join(src, "main.go")
	data, err := os.ReadFile(main)
	if err != nil {
		return err
	}
	for _, imp := range dropImports {
		if !bytes.Contains(data, []byte(imp)) {
			return fmt.Errorf("%s@%s's main.go has no line %s to drop", module, Version, imp)
		}
		data = bytes.Replace(data, []byte(imp), nil, 1)
	}
	if err := os.WriteFile(main, data, 0o644); err != nil {
		return err
	}
	ldflags := "-s -w -X " + module + "/pkg/version.Version=" + Version
	if _, err := goCmd(src, nil, "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(out, "flanneld"), "."); err != nil {
		return err
	}
	if _, err := goCmd(src, nil, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(out, "install-conf"), "./cmd/install_conf"); err != nil {
		return err
	}
	_, err = goCmd(tmp, []string{"GOBIN=" + out}, "install", "-trimpath", "-ldflags", "-s -w", cniModule)
	return err
}
