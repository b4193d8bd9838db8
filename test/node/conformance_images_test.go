//go:build kube

package node

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The images the [sig-network] specs run, under the names of
// test/utils/image/manifest.go of the e2e suite's version (v1.34.2), and
// the cluster DNS's. None is pulled: each is written from binaries built
// from the Go module proxy (test/conformance/build.sh) and Debian's, and
// imported into every node's containerd.
const (
	agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	// agnhostImageCNP is the same image under the name the
	// ClusterNetworkPolicy conformance suite's manifests give it
	// (network-policy-api v0.2.0's conformance/base)
	agnhostImageCNP = "registry.k8s.io/e2e-test-images/agnhost:2.45"
	// jessie-dnsutils: the DNS specs' second prober (dig in a shell loop)
	dnsutilsImage = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"
	busyboxImage  = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	// pauseImage is also every node's sandbox image
	pauseImage   = "registry.k8s.io/pause:3.10.1"
	corednsImage = "registry.k8s.io/coredns/coredns:" + corednsVersion
	// the KubeProxy spec's host pod: conntrack and iptables
	iptablesImage = "registry.k8s.io/build-image/distroless-iptables:v0.7.11"
	// the EndpointSlice spec's pods only need to run: agnhost serves
	// HTTP on port 80 in them, as nginx would
	nginxImage = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
	// the conntrack spec's sender of an out-of-window packet
	regressionImage = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.2"
	// corednsVersion is build.sh's default COREDNS_VERSION.
	corednsVersion = "v1.12.4"
)

// agnhostTools are the Debian programs the agnhost image has besides
// busybox, at the image path given: the real image is alpine with
// curl, netcat-openbsd, iproute2, bind-tools and bash. busybox's own would
// not do: its sh runs its nc before PATH's, its wget crashes on a name.
var agnhostTools = map[string]string{
	"/bin/bash":     "/usr/bin/bash",
	"/bin/sh":       "/usr/bin/bash",
	"/bin/curl":     "/usr/bin/curl",
	"/bin/wget":     "/usr/bin/wget",
	"/bin/nc":       "/usr/bin/nc.openbsd",
	"/bin/ip":       "/usr/bin/ip",
	"/bin/ss":       "/usr/bin/ss",
	"/bin/dig":      "/usr/bin/dig",
	"/bin/nslookup": "/usr/bin/nslookup",
	"/bin/host":     "/usr/bin/host",
	// the DNS specs' probes look names up with getent hosts
	"/bin/getent": "/usr/bin/getent",
}

// etcFiles are the agnhost image's /etc: its user and group (specs run
// as them), name lookup through files then DNS, and wget's one try (its
// default of 20 turns every failed probe into minutes).
var etcFiles = map[string]string{
	"/etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user:/bin/sh\n",
	"/etc/group":         "root:x:0:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
	"/etc/nsswitch.conf": "hosts: files dns\n",
	"/etc/wgetrc":        "tries = 1\n",
	"/uploads/.keep":     "",
	"/tmp/.keep":         "",
}

// writeConformanceImages writes, into dir, the archives of the agnhost
// image (agnhost, porter's certificate beside it, CoreDNS as /coredns,
// agnhostTools with their libraries; entrypoint /agnhost), jessie-dnsutils (the same files, no
// entrypoint), pause (agnhost pause), busybox, CoreDNS (/coredns, with
// Corefile from its ConfigMap), distroless-iptables (Debian's conntrack
// and iptables-nft), nginx (agnhost netexec on port 80) and
// regression-issue-74839, from tools, test/conformance/build.sh's
// directory. It returns their paths.
func writeConformanceImages(t *testing.T, dir, tools string) []string {
	t.Helper()
	host := map[string]string{}
	for image, h := range agnhostTools {
		if _, err := exec.LookPath(h); err != nil {
			t.Fatalf("%s: %v (apt-get install curl wget netcat-openbsd iproute2 bind9-dnsutils bash)", h, err)
		}
		host[image] = h
	}
	libs := map[string]string{}
	for _, h := range agnhostTools {
		libs[h] = h
	}
	withLibraries(t, libs)
	var files []imageFile
	for image, h := range host {
		files = append(files, fileFrom(t, image, h))
	}
	for lib := range libs {
		if !strings.HasPrefix(lib, "/usr/bin/") {
			files = append(files, fileFrom(t, lib, lib))
		}
	}
	for p, data := range etcFiles {
		files = append(files, imageFile{path: p, data: []byte(data), mode: 0o644})
	}
	for _, f := range []string{"agnhost", "localhost.crt", "localhost.key"} {
		files = append(files, fileFrom(t, "/"+f, filepath.Join(tools, f)))
	}
	files = append(files, imageFile{path: "/agnhost-2", link: "agnhost"},
		// the real image has CoreDNS as /coredns too (the DNS specs' own
		// server pods run it)
		fileFrom(t, "/coredns", filepath.Join(tools, "coredns-"+corednsVersion)))
	const path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	specs := map[string]imageSpec{
		"agnhost":  {refs: []string{agnhostImage, agnhostImageCNP}, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}, path: path, files: files},
		"dnsutils": {refs: []string{dnsutilsImage}, cmd: []string{"sh"}, path: path, files: files},
		"pause": {refs: []string{pauseImage}, entrypoint: []string{"/agnhost", "pause"},
			files: []imageFile{fileFrom(t, "/agnhost", filepath.Join(tools, "agnhost"))}},
		"busybox": {refs: []string{busyboxImage}, cmd: []string{"sh"}},
		"coredns": {refs: []string{corednsImage}, entrypoint: []string{"/coredns"},
			files: []imageFile{fileFrom(t, "/coredns", filepath.Join(tools, "coredns-"+corednsVersion))}},
	}
	ipt, links := iptablesFiles(t)
	ipt["/usr/sbin/conntrack"] = "/usr/sbin/conntrack"
	withLibraries(t, ipt)
	var iptFiles []imageFile
	for image, h := range ipt {
		iptFiles = append(iptFiles, fileFrom(t, image, h))
	}
	for image, target := range links {
		iptFiles = append(iptFiles, imageFile{path: image, link: target})
	}
	specs["iptables"] = imageSpec{refs: []string{iptablesImage}, cmd: []string{"sh"}, path: path, files: iptFiles}
	specs["nginx"] = imageSpec{refs: []string{nginxImage}, entrypoint: []string{"/agnhost", "netexec", "--http-port=80"},
		files: []imageFile{fileFrom(t, "/agnhost", filepath.Join(tools, "agnhost"))}}
	specs["regression"] = imageSpec{refs: []string{regressionImage}, entrypoint: []string{"/regression-issue-74839"},
		files: []imageFile{fileFrom(t, "/regression-issue-74839", filepath.Join(tools, "regression-issue-74839"))}}
	var out []string
	for name, spec := range specs {
		a := filepath.Join(dir, name+"-image.tar")
		writeImageSpec(t, a, spec)
		out = append(out, a)
	}
	return out
}
