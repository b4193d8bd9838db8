package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
)

// The image answers flannel's own manifest (kube-flannel.yml v0.28.9) with
// only its image: values changed: its containers run these paths.
//
//	install-cni-plugin  cp -f /flannel /opt/cni/bin/flannel
//	install-cni         /opt/bin/install-conf /etc/kube-flannel/cni-conf.json /etc/cni/net.d/10-flannel.conflist
//	kube-flannel        /opt/bin/flanneld --ip-masq --kube-subnet-mgr --healthz-port=8081
//
// /flannel is cnibox under the name of flannel's CNI plugin (a hard link:
// cp copies the file, and the copy's name picks the flannel role);
// /opt/bin/flanneld is cnibox-agent-kube, which takes flanneld's flags;
// /opt/bin/install-conf is a script doing what flannel's does (the
// conflist copied beside its destination and renamed over it). cp, mv and
// the shell are busybox's (-busybox): a static binary from Debian's
// busybox-static, with a link per applet in busyboxApplets.
const (
	flannelPlugin = "flannel"
	flanneld      = "opt/bin/flanneld"
	installConf   = "opt/bin/install-conf"
)

// busyboxApplets are the commands the image has: what the manifests' init
// containers and install-conf run, and a few for a person looking inside.
var busyboxApplets = []string{"sh", "cp", "mv", "rm", "cat", "ls", "mkdir", "dirname", "basename", "ln"}

// installConfScript is flannel's cmd/install_conf: usage, copy, rename.
const installConfScript = `#!/bin/sh
# install-conf SRC DEST: flannel's installer of the CNI conflist (its
# cmd/install_conf), as cnibox's image has it: SRC is copied beside DEST
# under a temporary name and renamed over DEST, so that a runtime reading
# DEST sees the old file or the new one, never part of one.
if [ $# -ne 2 ]; then
	echo "usage: $0 <src> <dest>" >&2
	exit 1
fi
tmp="$(dirname "$2")/.$(basename "$2").tmp"
if ! cp -f "$1" "$tmp" || ! mv -f "$tmp" "$2"; then
	rm -f "$tmp"
	echo "error installing \"$1\"" >&2
	exit 1
fi
`

// busyboxFiles reads the busybox binary at p (it must be linked
// statically: the image has no libraries) and returns it as /bin/busybox
// with a link per applet.
func busyboxFiles(p string) ([]File, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("-busybox: %w (Debian: apt-get install busybox-static)", err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("-busybox %s: not an executable: %w", p, err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("-busybox %s is linked dynamically and the image has no libraries: give a static one (Debian's busybox-static: /bin/busybox)", p)
		}
	}
	files := []File{{Path: "bin/busybox", Mode: 0o755, Data: data}}
	for _, a := range busyboxApplets {
		files = append(files, File{Path: "bin/" + a, Symlink: "busybox"})
	}
	return files, nil
}

// flannelFiles lays out flannel's paths over the binaries in binDir; it
// needs cnibox and cnibox-agent-kube among them.
func flannelFiles(bins map[string]bool) ([]File, error) {
	for _, b := range []string{"cnibox", "cnibox-agent-kube"} {
		if !bins[b] {
			return nil, errors.New("-busybox lays out flannel's paths (/flannel, /opt/bin/flanneld): name " + b + " among the binaries")
		}
	}
	return []File{
		{Path: flannelPlugin, HardLink: path.Join(binDir, "cnibox")},
		{Path: flanneld, Symlink: "/" + path.Join(binDir, "cnibox-agent-kube")},
		{Path: installConf, Mode: 0o755, Data: []byte(installConfScript)},
	}, nil
}
