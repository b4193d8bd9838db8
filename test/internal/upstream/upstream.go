// Package upstream builds what the tests and benches compare cnibox with and
// cannot get from Debian: the reference plugins of containernetworking/plugins
// at a pinned release, and cnitool at the cni module's version. Each is built
// once per version from the Go module proxy into the user's cache
// (os.UserCacheDir()/cnibox/...), in the caller's own network namespace: call
// it before entering a private namespace that has no way out (a test's
// TestMain before nstest.MainInPrivateNetns, a bench before its re-exec).
package upstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the reference release the side-by-side tests and benches use.
const Version = "v1.9.1"

// DirEnv names a directory that already holds the reference plugins of
// Version (make test-kernel builds them into its disk); when it is set,
// Plugins builds nothing and returns it.
const DirEnv = "CNIBOX_REF_UPSTREAM"

// cacheDir returns os.UserCacheDir()/cnibox/name, created.
func cacheDir(name string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the user's cache directory: %w", err)
	}
	dir := filepath.Join(base, "cnibox", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// Plugins returns a directory that holds the named reference plugins of
// Version ("bridge", "tap", ...; none: all of the release's Linux plugins),
// building the missing ones with go install the first time.
func Plugins(names ...string) (string, error) {
	if dir := os.Getenv(DirEnv); dir != "" {
		return dir, nil
	}
	dir, err := cacheDir("ref-plugins-" + Version)
	if err != nil {
		return "", err
	}
	pkgs := []string{"github.com/containernetworking/plugins/plugins/...@" + Version}
	if len(names) > 0 {
		pkgs = pkgs[:0]
		for _, n := range names {
			if !isFile(filepath.Join(dir, n)) {
				pkgs = append(pkgs, "github.com/containernetworking/plugins/plugins/"+kind(n)+"/"+n+"@"+Version)
			}
		}
	} else if isFile(filepath.Join(dir, ".all")) {
		pkgs = nil
	}
	if len(pkgs) == 0 {
		return dir, nil
	}
	// go install writes each binary under its final name: build into a
	// directory of its own and rename, so that a build cut short leaves no
	// half-written plugin in the cache.
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "upstream: building the reference plugins %s into %s (once)\n", Version, dir)
	cmd := exec.Command("go", append([]string{"install"}, pkgs...)...)
	cmd.Dir = tmp // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=-trimpath")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install the reference plugins %s (it needs the Go module proxy): %w\n%s", Version, err, out)
	}
	built, err := os.ReadDir(tmp)
	if err != nil {
		return "", err
	}
	for _, b := range built {
		if err := os.Rename(filepath.Join(tmp, b.Name()), filepath.Join(dir, b.Name())); err != nil {
			return "", err
		}
	}
	if len(names) == 0 {
		if err := os.WriteFile(filepath.Join(dir, ".all"), nil, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// kind returns the directory of plugins/ that holds the plugin name.
func kind(name string) string {
	switch name {
	case "host-local", "static", "dhcp":
		return "ipam"
	case "bandwidth", "firewall", "portmap", "sbr", "tuning":
		return "meta"
	}
	return "main"
}

// Cnitool returns cnitool built at the version of the cni module that the
// module in the current directory requires, kept in the cache under that
// version.
func Cnitool() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containernetworking/cni").Output()
	if err != nil {
		return "", fmt.Errorf("the cni module's version (go list -m): %w", err)
	}
	version := strings.TrimSpace(string(out))
	dir, err := cacheDir("cnitool-" + version)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cnitool")
	if isFile(bin) {
		return bin, nil
	}
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/containernetworking/cni/cnitool")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cnitool %s (it needs the Go module proxy or the module cache): %w\n%s", version, err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
