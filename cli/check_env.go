package cli

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cnibox/cnibox/cniplug"
)

// nodeEnv is what `cnibox check --node` reads of the node besides its
// interfaces: the files and sockets the roles' configs name
// (cniplug.NodeFile) and the kernel's features (cniplug.KernelFeature),
// read without changing anything: no module is loaded, no link made.
// root is "/" (a test's directory stands for the node's /).
type nodeEnv struct {
	root   string
	once   sync.Once
	kernel kernelInfo
}

// path is p (absolute) under the env's root.
func (e *nodeEnv) path(p string) string { return filepath.Join(e.root, p) }

// fileFindings are the files and sockets of role's NodeFiles that obj
// (the role's config, or its ipam section) needs and the node lacks.
func (e *nodeEnv) fileFindings(obj map[string]any, role *cniplug.Role, prefix string) []checkFinding {
	var out []checkFinding
	for _, nf := range role.Known.NodeFiles {
		v, _ := obj[nf.Field].(string)
		if v == "" {
			v = nf.Default
		}
		if v == "" {
			continue
		}
		p := v
		if nf.Under != "" {
			p = filepath.Join(nf.Under, v)
		}
		if !filepath.IsAbs(p) {
			continue // the role's parser says so
		}
		sev := sevError
		if nf.Later {
			sev = sevWarning
		}
		f := checkFinding{Severity: sev, Path: prefix + nf.Field, Value: v, Fix: nf.Fix}
		fi, err := os.Stat(e.path(p))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			f.Message = fmt.Sprintf("the node has no %s: %s", p, nf.Fails)
		case err != nil:
			f.Severity, f.Fix = sevWarning, ""
			f.Message = fmt.Sprintf("cannot look at %s: %v", p, err)
		case nf.Socket && fi.Mode()&fs.ModeSocket == 0:
			what := "a " + fi.Mode().Type().String()
			switch {
			case fi.Mode().IsRegular():
				what = "a regular file"
			case fi.IsDir():
				what = "a directory"
			}
			f.Message = fmt.Sprintf("%s is %s, no socket: %s", p, what, nf.Fails)
		case nf.Socket:
			c, err := net.DialTimeout("unix", e.path(p), 2*time.Second)
			if err == nil {
				c.Close()
				continue
			}
			f.Message = fmt.Sprintf("nothing listens on %s (%v): %s", p, errors.Unwrap(err), nf.Fails)
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

// kernelFindings are the features of role's Kernel that this kernel
// lacks, as far as it says: nothing when it says nothing readable.
func (e *nodeEnv) kernelFindings(role *cniplug.Role, typ string) []checkFinding {
	e.once.Do(func() { e.kernel = readKernel(e.root) })
	var out []checkFinding
	for _, kf := range role.Known.Kernel {
		has, source := e.kernel.has(kf)
		if has || source == "" {
			continue
		}
		out = append(out, checkFinding{Severity: sevError, Path: "type", Value: typ,
			Message: fmt.Sprintf("this kernel (%s) has no %s (%s): every ADD of %s fails", e.kernel.release, kf.Module, source, typ),
			Fix:     fmt.Sprintf("a kernel built with %s (=y, or =m with the module installed), or another plugin (docs/kernels.md)", kf.Config)})
	}
	return out
}

// kernelInfo is what the running kernel says of its features: the modules
// loaded or built in that show in /sys/module, its config (/proc/config.gz,
// else /boot/config-RELEASE), else the module lists of
// /lib/modules/RELEASE.
type kernelInfo struct {
	release string
	root    string
	// config is CONFIG_X -> y or m (nil: no config readable), from
	// configFrom.
	config     map[string]string
	configFrom string
	// modules are the modules built in or installed (nil: no list
	// readable), from modulesFrom.
	modules     map[string]bool
	modulesFrom string
}

func readKernel(root string) kernelInfo {
	k := kernelInfo{root: root}
	if b, err := os.ReadFile(filepath.Join(root, "/proc/sys/kernel/osrelease")); err == nil {
		k.release = strings.TrimSpace(string(b))
	}
	for _, p := range []string{"/proc/config.gz", "/boot/config-" + k.release} {
		if k.release == "" && !strings.HasSuffix(p, ".gz") {
			continue
		}
		if c, err := readKernelConfig(filepath.Join(root, p)); err == nil {
			k.config, k.configFrom = c, p
			break
		}
	}
	if k.config == nil && k.release != "" {
		dir := "/lib/modules/" + k.release
		for _, list := range []string{"modules.builtin", "modules.dep"} {
			f, err := os.Open(filepath.Join(root, dir, list))
			if err != nil {
				continue
			}
			if k.modules == nil {
				k.modules, k.modulesFrom = map[string]bool{}, dir
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				name, _, _ := strings.Cut(sc.Text(), ":")
				name = strings.TrimSuffix(filepath.Base(name), ".ko")
				k.modules[strings.ReplaceAll(name, "-", "_")] = true
			}
			f.Close()
		}
	}
	return k
}

// has reports whether the kernel has f, and where it read that it does
// not ("" when nothing says: unknown).
func (k kernelInfo) has(f cniplug.KernelFeature) (ok bool, source string) {
	if fi, err := os.Stat(filepath.Join(k.root, "/sys/module", f.Module)); err == nil && fi.IsDir() {
		return true, ""
	}
	switch {
	case k.config != nil:
		v := k.config[f.Config]
		return v == "y" || v == "m", f.Config + " is not set in " + k.configFrom
	case k.modules != nil:
		return k.modules[strings.ReplaceAll(f.Module, "-", "_")], "no " + f.Module + " in " + k.modulesFrom + "'s modules.builtin or modules.dep"
	}
	return false, ""
}

// readKernelConfig reads a kernel config (gzip'd when its name ends in .gz)
// into CONFIG_X -> value.
func readKernelConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer z.Close()
		r = z
	}
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			out[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
