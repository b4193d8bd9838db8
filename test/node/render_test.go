//go:build kube

package node

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// cniHostPaths are the manifest's host paths the test points at the node's
// own directories (the runtime's bin_dir and conf_dir). Every other host
// path must be one the node keeps private (node.sh mounts a tmpfs there).
var (
	cniHostPaths = []string{"/opt/cni/bin", "/etc/cni/net.d"}
	privateDirs  = []string{"/run/", "/var/lib/", "/var/log/"}
)

// deployment is the manifest as the test applies it, and what the checks
// need out of it.
type deployment struct {
	yaml    string // the rendered manifest: kubectl apply -f / delete -f
	image   string // the DaemonSet's image
	cniConf string // the ConfigMap's cni-conf.json
	network string // net-conf.json's Network
}

// render reads the manifest (make image's bin/cnibox.yaml) and changes, in
// the DaemonSet, only the CNI host paths (to n.hostDir), and in the
// ConfigMap, the API server's address for the agent: the node has no
// kube-proxy, which is what api-server-host and api-server-port are for
// (docs/deploy.md). Every other object goes through unchanged. With n nil
// nothing changes (a cluster's nodes have the CNI dirs at the host paths
// and reach the API server at the kubernetes Service's address).
func render(t *testing.T, n *node, path string) deployment {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d deployment
	var docs []string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(trustDefault(string(data)), -1) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var meta struct{ Kind string }
		if err := json.Unmarshal(js, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "":
			continue // the leading comment
		case "DaemonSet":
			js = renderDaemonSet(t, n, js, &d)
		case "ConfigMap":
			js = renderConfigMap(t, n, js, &d)
		}
		docs = append(docs, string(js))
	}
	if d.image == "" || d.cniConf == "" {
		t.Fatalf("%s: no DaemonSet image or no cni-conf.json", path)
	}
	d.yaml = strings.Join(docs, "\n---\n")
	return d
}

func renderDaemonSet(t *testing.T, n *node, js []byte, d *deployment) []byte {
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(js, &ds); err != nil {
		t.Fatal(err)
	}
	moved := map[string]bool{}
	for i := range ds.Spec.Template.Spec.Volumes {
		if n == nil {
			break
		}
		hp := ds.Spec.Template.Spec.Volumes[i].HostPath
		if hp == nil {
			continue
		}
		switch {
		case slices.Contains(cniHostPaths, hp.Path):
			moved[hp.Path] = true
			hp.Path = n.hostDir(hp.Path)
		case !hasPrefix(privateDirs, hp.Path+"/"):
			t.Fatalf("the DaemonSet mounts the host path %s, which the test node does not keep private: "+
				"point it at the node's directory here (cniHostPaths) or make it private in node.sh", hp.Path)
		}
	}
	for _, p := range cniHostPaths {
		if n != nil && !moved[p] {
			t.Fatalf("the DaemonSet has no host path %s: the test expects the CNI dirs there", p)
		}
	}
	for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
		if d.image != "" && c.Image != d.image {
			t.Fatalf("the DaemonSet's containers use two images: %s and %s", d.image, c.Image)
		}
		d.image = c.Image
	}
	out, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func renderConfigMap(t *testing.T, n *node, js []byte, d *deployment) []byte {
	var cm corev1.ConfigMap
	if err := json.Unmarshal(js, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if n != nil {
		cm.Data["api-server-host"], cm.Data["api-server-port"] = "127.0.0.1", apiPort
	}
	d.cniConf = cm.Data["cni-conf.json"]
	var netConf struct{ Network string }
	if err := json.Unmarshal([]byte(cm.Data["net-conf.json"]), &netConf); err != nil {
		t.Fatalf("net-conf.json: %v", err)
	}
	d.network = netConf.Network
	out, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hasPrefix(prefixes []string, s string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// trustDefault adds --nad-trusted-namespaces=kube-system,default after the
// agent's --pod-api or --pod-api-only: the tests' NetworkAttachmentDefinitions
// live in default and use roles that reach the node (host-device, a bridge,
// a macvlan on eth0), which the agent serves only to a namespace it trusts
// (docs/security.md).
func trustDefault(manifest string) string {
	return regexp.MustCompile(`(?m)^(\s*)- (--pod-api(?:-only)?)\s*$`).ReplaceAllString(manifest, "$1- $2\n$1- --nad-trusted-namespaces=kube-system,default")
}

// ctrName is the name containerd gives the image a manifest names:
// NAME@DIGEST for make image's NAME:TAG@DIGEST (the kubelet's lookup drops
// the tag of a reference with a digest), the reference itself otherwise.
func ctrName(ref string) string {
	nameTag, dgst, ok := strings.Cut(ref, "@")
	if !ok {
		return ref
	}
	if i := strings.LastIndex(nameTag, ":"); i > strings.LastIndex(nameTag, "/") {
		nameTag = nameTag[:i]
	}
	return nameTag + "@" + dgst
}
