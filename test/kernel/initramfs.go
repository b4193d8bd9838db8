package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// moduleTrees are the directories under /lib/modules/KVER/kernel whose every
// module is loaded: a guest without modprobe loads nothing on demand.
var moduleTrees = []string{"net/netfilter", "net/ipv4/netfilter", "net/ipv6/netfilter", "net/bridge", "net/sched", "net/8021q"}

// moduleNames are the single modules loaded besides the trees.
var moduleNames = []string{"virtio_pci", "virtio_blk", "veth", "vxlan", "geneve", "dummy", "ipvlan", "ipvtap", "macvlan", "macvtap", "vrf", "tun", "ifb", "wireguard", "ipip", "bonding", "nlmon", "sch_fq_codel", "xfrm_user", "xfrm_interface", "sctp"}

// hostTools are the dynamically linked programs the tests run, copied with
// the libraries ldd names.
var hostTools = []string{"/sbin/ip", "/sbin/tc", "/sbin/bridge", "/usr/sbin/nft", "/bin/bash", xtablesMulti, "/usr/sbin/dnsmasq", setprivUtil}

// setprivUtil is util-linux's setpriv (busybox's lacks --bounding-set): the
// dhcp daemon's capability test runs the daemon under it; /usr/bin comes
// before busybox's /bin in the guest's PATH.
const setprivUtil = "/usr/bin/setpriv"

// xtablesMulti is iptables-nft's multi-call binary: the firewall tests run
// it (as iptables-nft and ip6tables-nft, the names it answers to) to set a
// DROP policy and list rules as an operator would; its matches are the
// shared objects in xtablesDir, loaded when a rule names them.
const (
	xtablesMulti = "/usr/sbin/xtables-nft-multi"
	xtablesDir   = "/usr/lib/x86_64-linux-gnu/xtables"
)

// buildInitramfs returns the initramfs for kver, built once per kernel,
// module list and init script.
func buildInitramfs(cache, kver string) (string, error) {
	mods, err := moduleLoadOrder(kver)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintln(h, kver, initScript, mods, hostTools)
	path := filepath.Join(cache, fmt.Sprintf("initramfs-%s-%s.cpio.gz", kver, hex.EncodeToString(h.Sum(nil))[:12]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	w := newCpio()
	w.file("/init", []byte(initScript), 0o755)
	w.file("/modules", []byte(strings.Join(mods, "\n")+"\n"), 0o644)
	if err := w.copy("/bin/busybox", "/bin/busybox", 0o755); err != nil {
		return "", err
	}
	for _, m := range mods {
		if err := w.copy(strings.Fields(m)[1], strings.Fields(m)[1], 0o644); err != nil {
			return "", err
		}
	}
	libs := map[string]bool{}
	for _, t := range hostTools {
		if err := w.copy(t, "/usr"+strings.TrimPrefix(t, "/usr"), 0o755); err != nil {
			return "", err
		}
		ls, err := sharedLibs(t)
		if err != nil {
			return "", err
		}
		for _, l := range ls {
			libs[l] = true
		}
	}
	for _, name := range []string{"iptables-nft", "ip6tables-nft"} {
		if err := w.copy(xtablesMulti, "/usr/sbin/"+name, 0o755); err != nil {
			return "", err
		}
	}
	if err := w.tree(xtablesDir); err != nil {
		return "", err
	}
	exts, _ := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	for _, e := range exts {
		ls, err := sharedLibs(e)
		if err != nil {
			return "", err
		}
		for _, l := range ls {
			libs[l] = true
		}
	}
	for l := range libs {
		if err := w.copy(l, l, 0o755); err != nil {
			return "", err
		}
	}
	for _, d := range []string{"/etc/iproute2", "/usr/share/iproute2"} {
		if err := w.tree(d); err != nil {
			return "", err
		}
	}
	w.file("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	w.file("/etc/group", []byte("root:x:0:\n"), 0o644)
	w.file("/etc/hosts", []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644)
	b, err := w.close()
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// moduleLoadOrder lists "insmod PATH [OPTS]" lines, each module after the
// ones it depends on, as modprobe --show-depends orders them.
func moduleLoadOrder(kver string) ([]string, error) {
	root := filepath.Join("/lib/modules", kver, "kernel")
	names := append([]string(nil), moduleNames...)
	for _, t := range moduleTrees {
		_ = filepath.WalkDir(filepath.Join(root, t), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
				names = append(names, strings.TrimSuffix(filepath.Base(p), ".ko"))
			}
			return nil
		})
	}
	sort.Strings(names[len(moduleNames):])
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		b, err := exec.Command("modprobe", "-S", kver, "--show-depends", n).Output()
		if err != nil {
			continue // not a module of this kernel (built in, or absent)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "insmod" || seen[f[1]] {
				continue
			}
			seen[f[1]] = true
			out = append(out, strings.Join(f, " "))
		}
	}
	return out, nil
}

// sharedLibs lists the libraries (and the loader) ldd names for bin.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
				break
			}
		}
	}
	return libs, nil
}

// cpioWriter writes a gzip-compressed cpio archive (newc), with the parent
// directories of every file.
type cpioWriter struct {
	buf  bytes.Buffer
	gz   *gzip.Writer
	dirs map[string]bool
	ino  int
	err  error
}

func newCpio() *cpioWriter {
	w := &cpioWriter{dirs: map[string]bool{"/": true}}
	w.gz, _ = gzip.NewWriterLevel(&w.buf, gzip.BestSpeed)
	return w
}

func (w *cpioWriter) entry(name string, mode uint32, data []byte) {
	w.ino++
	name = strings.TrimPrefix(name, "/")
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		w.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	w.write([]byte(hdr + name + "\x00"))
	w.pad(len(hdr) + len(name) + 1)
	w.write(data)
	w.pad(len(data))
}

func (w *cpioWriter) write(b []byte) {
	if w.err == nil {
		_, w.err = w.gz.Write(b)
	}
}

func (w *cpioWriter) pad(n int) {
	if n%4 != 0 {
		w.write(make([]byte, 4-n%4))
	}
}

func (w *cpioWriter) mkdirs(dir string) {
	if w.dirs[dir] {
		return
	}
	w.mkdirs(filepath.Dir(dir))
	w.dirs[dir] = true
	w.entry(dir, 0o040755, nil)
}

func (w *cpioWriter) file(name string, data []byte, perm uint32) {
	w.mkdirs(filepath.Dir(name))
	w.entry(name, 0o100000|perm, data)
}

// copy adds the host file from (following symlinks) as name.
func (w *cpioWriter) copy(from, name string, perm uint32) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	w.file(name, b, perm)
	return nil
}

// tree adds the regular files under dir, if it exists.
func (w *cpioWriter) tree(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return w.copy(p, p, 0o644)
	})
}

func (w *cpioWriter) close() ([]byte, error) {
	w.entry("TRAILER!!!", 0, nil)
	if w.err != nil {
		return nil, w.err
	}
	if err := w.gz.Close(); err != nil {
		return nil, err
	}
	return io.ReadAll(&w.buf)
}
