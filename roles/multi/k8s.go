package multi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// The Kubernetes path of the multi role: the pod's
// k8s.v1.cni.cncf.io/networks annotation adds networks after the configured
// delegates, and the k8s.v1.cni.cncf.io/network-status annotation reports
// them all. cnibox never talks to the API server itself (client-go would
// cost every CNI call milliseconds): it asks cnibox-agent's pod API on a
// unix socket (internal/agentapi), which watches the node's pods.

// DefaultMultiConfDir is where the multi role finds the conflist of a
// network a pod names when no NetworkAttachmentDefinition of that name has
// a config (Multus' default "confDir"; outside /etc/cni/net.d, so the
// runtime does not take these networks for the pod network).
const DefaultMultiConfDir = "/etc/cni/multus/net.d"

// multiK8sConf is the Kubernetes part of the multi config.
type multiK8sConf struct {
	// Kubernetes turns the pod path on.
	Kubernetes bool `json:"kubernetes"`
	// AgentSocket is cnibox-agent's pod API; setting it turns the pod path
	// on.
	AgentSocket string `json:"agentSocket"`
	// Kubeconfig is Multus' switch of the pod path: accepted and turns it
	// on, but never read (the agent has its own credentials).
	Kubeconfig string `json:"kubeconfig"`
	// ConfDir holds the conflists of networks named by pods.
	ConfDir string `json:"confDir"`
}

// multiK8sTimeout bounds the calls to the agent on ADD (the agent answers
// from its cache; only a pod it has not seen yet costs an API round trip).
const multiK8sTimeout = 15 * time.Second

// multiK8sClearTimeout bounds DEL's best-effort removal of network-status.
const multiK8sClearTimeout = 2 * time.Second

func parseMultiK8s(stdin []byte) (*multiK8sConf, error) {
	var k multiK8sConf
	if err := json.Unmarshal(stdin, &k); err != nil {
		return nil, delegate.DecodeError("multi config", err)
	}
	if k.ConfDir == "" {
		k.ConfDir = DefaultMultiConfDir
	} else if !filepath.IsAbs(k.ConfDir) {
		return nil, cniplug.ConfError("confDir", "%q is not an absolute path: give the full path of the directory of the pods' network configs", k.ConfDir)
	}
	if k.AgentSocket != "" && !filepath.IsAbs(k.AgentSocket) {
		return nil, cniplug.ConfError("agentSocket", "%q is not an absolute path: give cnibox-agent's --socket (default %s)", k.AgentSocket, agentapi.DefaultSocket)
	}
	return &k, nil
}

// enabled reports whether the config asks for the pod path.
func (k *multiK8sConf) enabled() bool {
	return k.Kubernetes || k.AgentSocket != "" || k.Kubeconfig != ""
}

func (k *multiK8sConf) client(timeout time.Duration) *agentapi.Client {
	s := k.AgentSocket
	if s == "" {
		s = agentapi.DefaultSocket
	}
	return &agentapi.Client{Socket: s, Timeout: timeout}
}

// multiPod is the pod of a multi ADD on the Kubernetes path.
type multiPod struct {
	client              *agentapi.Client
	namespace, name, id string // id: K8S_POD_UID, may be empty
	// statusNames are the network-status names of the delegates that came
	// from the annotation, by delegate index ("namespace/name").
	statusNames map[int]string
}

func (p *multiPod) String() string { return p.namespace + "/" + p.name }

// agentErr gives an error of the agent's pod API its CNI code: an agent
// that does not answer or cannot reach the API server is 11 (try again
// later), with what to do; anything else is an I/O failure.
func agentErr(p *multiPod, what string, err error) error {
	var un *agentapi.UnreachableError
	var ae *agentapi.Error
	switch {
	case errors.As(err, &un):
		return cniplug.Errorf(types.ErrTryAgainLater, "multi: %s of pod %s: %w: run cnibox-agent with --pod-api (or --pod-api-only) and --socket %s, or set \"agentSocket\" to its socket",
			what, p, err, un.Socket)
	case errors.As(err, &ae) && ae.Reason == agentapi.ReasonUnavailable:
		return cniplug.Errorf(types.ErrTryAgainLater, "multi: %s of pod %s: cnibox-agent at %s: %w", what, p, p.client.Socket, err)
	}
	return cniplug.Errorf(types.ErrIOFailure, "multi: %s of pod %s: cnibox-agent at %s: %w", what, p, p.client.Socket, err)
}

// multiK8sSelect adds the networks of the pod's networks annotation to c
// after the configured delegates. It returns nil (and changes nothing) when
// the config does not ask for the pod path or CNI_ARGS name no pod.
func multiK8sSelect(ctx context.Context, a *cniplug.Args, c *multiConf) (*multiPod, error) {
	k, err := parseMultiK8s(a.StdinData)
	if err != nil || !k.enabled() {
		return nil, err
	}
	ns, name := string(a.CNIArgs.K8S_POD_NAMESPACE), string(a.CNIArgs.K8S_POD_NAME)
	if ns == "" || name == "" {
		return nil, nil
	}
	p := &multiPod{client: k.client(multiK8sTimeout), namespace: ns, name: name, id: string(a.CNIArgs.K8S_POD_UID), statusNames: map[int]string{}}
	pod, err := p.client.Pod(ctx, ns, name, p.id)
	if err != nil {
		if errors.Is(err, agentapi.ErrNotFound) {
			return nil, cniplug.Errorf(types.ErrTryAgainLater, "multi: pod %s (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME): %v", p, err)
		}
		return nil, agentErr(p, "the annotations", err)
	}
	sels, err := parseNetworksAnnotation(ns, p.String(), pod.Annotations[agentapi.NetworksAnnotation])
	if err != nil {
		return nil, err
	}
	ifnames := map[string]string{}
	for _, d := range c.Delegates {
		ifnames[d.IfName] = d.describe()
	}
	for j, s := range sels {
		i := len(c.Delegates)
		d, err := resolveSelection(ctx, p, k, s, i, a.Conf.CNIVersion)
		if err != nil {
			return nil, fmt.Errorf("pod %s annotation %s: network %d (%s): %w", p, agentapi.NetworksAnnotation, j, s.qualified(), err)
		}
		d.Field = fmt.Sprintf("%s[%d] %s", agentapi.NetworksAnnotation, j, s.qualified())
		if prev, dup := ifnames[d.IfName]; dup {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s annotation %s: network %d (%s) gets interface %q, which is already that of %s: give it another with \"%s@IFNAME\" or \"interface\"",
				p, agentapi.NetworksAnnotation, j, s.qualified(), d.IfName, prev, s.qualified())
		}
		ifnames[d.IfName] = d.describe()
		p.statusNames[i] = s.qualified()
		c.Delegates = append(c.Delegates, d)
	}
	return p, nil
}

// resolveSelection finds the config of a selected network: the
// NetworkAttachmentDefinition's spec.config, else (no such object, no CRD,
// or an empty config) the file in confDir whose network name is the
// selection's, as Multus does.
func resolveSelection(ctx context.Context, p *multiPod, k *multiK8sConf, s networkSelection, index int, version string) (*multiDelegate, error) {
	var body []byte
	source := ""
	nad, err := p.client.NetAttachDef(ctx, p.namespace, s.Namespace, s.Name)
	switch {
	case err == nil && strings.TrimSpace(nad.Config) != "":
		body, source = []byte(nad.Config), "NetworkAttachmentDefinition "+s.qualified()
	case err == nil || errors.Is(err, agentapi.ErrNotFound):
		path, b, ferr := findNetworkFile(k.ConfDir, s.Name)
		if ferr != nil {
			return nil, ferr
		}
		if b == nil {
			what := "no NetworkAttachmentDefinition " + s.qualified()
			if err == nil {
				what = "NetworkAttachmentDefinition " + s.qualified() + " has no spec.config"
			}
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s and no config with \"name\": %q in %s (confDir): create one of them", what, s.Name, k.ConfDir)
		}
		body, source = b, path
	default:
		return nil, agentErr(p, "NetworkAttachmentDefinition "+s.qualified(), err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "%s is not a JSON network config or conflist: %v", source, err)
	}
	delete(obj, "ifname")
	if s.Interface != "" {
		obj["ifname"], _ = json.Marshal(s.Interface)
	}
	if _, ok := obj["name"]; !ok {
		obj["name"], _ = json.Marshal(s.Name)
	}
	raw, _ := json.Marshal(obj)
	d, err := resolveDelegate(index, raw, version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if strings.HasPrefix(source, "/") {
		d.Path = source
	}
	rc := map[string]any{}
	if len(s.IPs) > 0 {
		rc["ips"] = s.IPs
	}
	if s.MAC != "" {
		rc["mac"] = s.MAC
	}
	if err := bakeRuntimeConfig(d, rc); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return d, nil
}

// findNetworkFile returns the first file (*.conf, *.conflist, *.json, by
// name) of dir whose "name" is name, or a nil body when there is none.
func findNetworkFile(dir, name string) (string, []byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, cniplug.Errorf(types.ErrIOFailure, "read confDir %s: %w", dir, err)
	}
	for _, e := range entries { // sorted by name
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".conf" && ext != ".conflist" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := delegateFile.Read(path)
		if err != nil {
			return "", nil, err
		}
		var n struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(b, &n) == nil && n.Name == name {
			return path, b, nil
		}
	}
	return "", nil, nil
}

// bakeRuntimeConfig puts the runtimeConfig entries of rc (the selection's
// "ips" and "mac") into the plugins of d that declare those capabilities, so
// that the record (and so DEL and CHECK) carry them too. An entry no plugin
// declares is an error: the request would be dropped silently.
func bakeRuntimeConfig(d *multiDelegate, rc map[string]any) error {
	if len(rc) == 0 {
		return nil
	}
	var list map[string]json.RawMessage
	var plugins []map[string]json.RawMessage
	if err := json.Unmarshal(d.List.Bytes, &list); err != nil {
		return cniplug.Errorf(types.ErrDecodingFailure, "%s: %v", d.describe(), err)
	}
	if err := json.Unmarshal(list["plugins"], &plugins); err != nil || len(plugins) != len(d.List.Plugins) {
		return cniplug.Errorf(types.ErrDecodingFailure, "%s: plugins: %v", d.describe(), err)
	}
	used := map[string]bool{}
	for j, p := range d.List.Plugins {
		rt := map[string]any{}
		if old, ok := plugins[j]["runtimeConfig"]; ok {
			_ = json.Unmarshal(old, &rt)
		}
		for capability, v := range rc {
			if p.Network.Capabilities[capability] {
				rt[capability], used[capability] = v, true
			}
		}
		if len(rt) > 0 {
			plugins[j]["runtimeConfig"], _ = json.Marshal(rt)
		}
	}
	var missing []string
	for capability := range rc {
		if !used[capability] {
			missing = append(missing, capability)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "the pod asks for %s, but no plugin of network %q declares that capability (\"capabilities\": {%q: true})",
			strings.Join(missing, " and "), d.List.Name, missing[0])
	}
	list["plugins"], _ = json.Marshal(plugins)
	b, _ := json.Marshal(list)
	l, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: %v", d.describe(), err)
	}
	d.List = l
	return nil
}

// multiK8sClear removes the pod's network-status annotation after a DEL,
// best effort: DEL never needs the agent, and a pod already gone is fine.
func multiK8sClear(ctx context.Context, a *cniplug.Args) {
	k, err := parseMultiK8s(a.StdinData)
	ns, name := string(a.CNIArgs.K8S_POD_NAMESPACE), string(a.CNIArgs.K8S_POD_NAME)
	if err != nil || !k.enabled() || ns == "" || name == "" {
		return
	}
	err = k.client(multiK8sClearTimeout).SetNetworkStatus(ctx, ns, name, string(a.CNIArgs.K8S_POD_UID), nil)
	if err != nil && !errors.Is(err, agentapi.ErrNotFound) {
		delegate.Log(a, "multi DEL: network-status of pod %s/%s not removed (ignored): %v", ns, name, err)
	}
}
