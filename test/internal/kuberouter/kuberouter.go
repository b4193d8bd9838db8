// Package kuberouter builds kube-router, the NetworkPolicy controller
// cnibox's policy engine is compared with (its --run-firewall mode,
// iptables and ipset, as k3s embeds it), at the one release the Go module
// proxy serves (Version). It is built once per version from the module
// proxy into the user's cache, os.UserCacheDir()/cnibox-kube-router/VERSION,
// in the caller's own network namespace: call it before entering a private
// namespace that has no way out.
//
// v2.1.0 has reported security flaws: it is a test anchor only, run inside
// the tests' own namespaces, never put in an image cnibox ships.
package kuberouter

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the kube-router release the side-by-side tests use.
const Version = "v2.1.0"

const pkg = "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"

// BinaryEnv names an already built kube-router; when it is set, Binary
// builds nothing.
const BinaryEnv = "CNIBOX_KUBE_ROUTER"

// Binary returns the path of kube-router Version (static, CGO_ENABLED=0),
// building it the first time (about 7 minutes on 2 cores with an empty
// module cache).
func Binary() (string, error) {
	if b := os.Getenv(BinaryEnv); b != "" {
		return b, nil
	}
	dir, bin, err := cachePath()
	if err != nil {
		return "", err
	}
	if Cached() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "kuberouter: building kube-router %s into %s (once; it needs the Go module proxy)\n", Version, dir)
	// go install PKG@VERSION builds the module as released (its go.mod
	// has no replace lines), outside any module of the caller.
	ldflags := "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=" + Version
	cmd := exec.Command("go", "install", "-trimpath", "-ldflags", ldflags, pkg+"@"+Version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off", "GOBIN="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, stderr.String())
	}
	// A rename: another run sees all of it or none of it.
	if err := os.Rename(filepath.Join(tmp, "kube-router"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// cachePath is where Binary keeps kube-router Version: its directory and
// the binary.
func cachePath() (dir, bin string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", "", fmt.Errorf("the user's cache directory: %w", err)
	}
	dir = filepath.Join(cache, "cnibox-kube-router", Version)
	return dir, filepath.Join(dir, "kube-router"), nil
}

// Cached reports whether Binary has kube-router Version in the user's
// cache already (it would build nothing).
func Cached() bool {
	_, bin, err := cachePath()
	if err != nil {
		return false
	}
	st, err := os.Stat(bin)
	return err == nil && st.Mode().IsRegular()
}
