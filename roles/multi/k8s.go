package multi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/cniargs"
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
	if err := cniplug.DecodeConf("multi config", stdin, &k); err != nil {
		return nil, err
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
	// devices are the pod's devices by resource name (read once, when a
	// NAD has a resourceName); used counts those handed out.
	devices map[string][]string
	used    map[string]int
}

func (p *multiPod) String() string { return p.namespace + "/" + p.name }

// agentErr gives an error of the agent's pod API its CNI code: an agent
// that does not answer or cannot reach the API server is 11 (try again
// later), with what to do; a NAD its policy refuses is 7 (the agent's
// message names the field and the fix); anything else is an I/O failure.
func agentErr(p *multiPod, what string, err error) error {
	var un *agentapi.UnreachableError
	var ae *agentapi.Error
	switch {
	case errors.As(err, &un):
		return cniplug.Errorf(types.ErrTryAgainLater, "multi: %s of pod %s: %w: run cnibox-agent with --pod-api (or --pod-api-only) and --socket %s, or set \"agentSocket\" to its socket",
			what, p, err, un.Socket)
	case errors.As(err, &ae) && ae.Reason == agentapi.ReasonPolicy:
		// A NAD the agent's policy refuses: the config is invalid here.
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "multi: %s of pod %s: cnibox-agent refuses it: %w", what, p, err)
	case errors.As(err, &ae) && ae.Reason == agentapi.ReasonUnavailable:
		return cniplug.Errorf(types.ErrTryAgainLater, "multi: %s of pod %s: cnibox-agent at %s: %w", what, p, p.client.Socket, err)
	case cniplug.CodeOf(err) != types.ErrInternal && !errors.As(err, &ae):
		return err // a coded error of ours
	}
	return cniplug.Errorf(types.ErrIOFailure, "multi: %s of pod %s: cnibox-agent at %s: %w", what, p, p.client.Socket, err)
}

// multiK8sSelect completes c's networks from the pod, as Multus: the
// clusterNetwork NAD, the pod's v1.multus-cni.io/default-network in place
// of the primary, defaultNetworks (not for pods of systemNamespaces), then
// the networks of the pod's networks annotation. It returns nil (and
// changes nothing) when the config does not ask for the pod path or
// CNI_ARGS name no pod.
func multiK8sSelect(ctx context.Context, a *cniplug.Args, c *multiConf) (*multiPod, error) {
	k, err := parseMultiK8s(a.StdinData)
	if err != nil || !k.enabled() {
		return nil, err
	}
	ns, name := string(a.CNIArgs.K8S_POD_NAMESPACE), string(a.CNIArgs.K8S_POD_NAME)
	if ns == "" || name == "" {
		return nil, nil
	}
	m := c.Multus
	p := &multiPod{client: k.client(multiK8sTimeout), namespace: ns, name: name, id: string(a.CNIArgs.K8S_POD_UID), used: map[string]int{}}
	pod, err := p.client.Pod(ctx, ns, name, p.id)
	if err != nil {
		if errors.Is(err, agentapi.ErrNotFound) {
			return nil, cniplug.Errorf(types.ErrTryAgainLater, "multi: pod %s (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME): %v", p, err)
		}
		return nil, agentErr(p, "the annotations", err)
	}
	version := a.Conf.CNIVersion
	if c.pendingCluster != "" {
		ref, err := resolveRef(ctx, p.client, m, k.ConfDir, c.pendingCluster)
		if err != nil {
			return nil, agentErr(p, fmt.Sprintf("clusterNetwork %q", c.pendingCluster), err)
		}
		d, err := p.withDevice(ctx, ref, "clusterNetwork", 0, "", version)
		if err != nil {
			return nil, err
		}
		d.IfName = a.IfName
		c.Delegates = []*multiDelegate{d}
	}
	if v, ok := pod.Annotations[agentapi.DefaultNetworkAnnotation]; ok {
		d, err := p.defaultNetwork(ctx, k, m, v, version)
		if err != nil {
			return nil, err
		}
		d.IfName = a.IfName
		if len(c.Delegates) == 0 {
			c.Delegates = []*multiDelegate{d}
		}
		c.Delegates[0] = d
	}
	if len(c.Delegates) == 0 {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "multi: no primary network for pod %s: clusterNetwork %q did not resolve", p, m.ClusterNetwork)
	}
	if m.ClusterNetwork != "" && !m.systemNamespace(ns) {
		for j, ref := range m.DefaultNetworks {
			field := fmt.Sprintf("defaultNetworks[%d] %s", j, ref)
			r, err := resolveRef(ctx, p.client, m, k.ConfDir, ref)
			if err != nil {
				return nil, agentErr(p, field, err)
			}
			d, err := p.withDevice(ctx, r, field, len(c.Delegates), "", version)
			if err != nil {
				return nil, err
			}
			c.Delegates = append(c.Delegates, d)
		}
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
		what := fmt.Sprintf("pod %s annotation %s: network %d (%s)", p, agentapi.NetworksAnnotation, j, s.qualified())
		if !m.mayReference(ns, s.Namespace) {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: namespace isolation (\"namespaceIsolation\": true) lets a pod of %q select NetworkAttachmentDefinitions of its own namespace and of %q (\"globalNamespaces\") only",
				what, ns, strings.Join(m.globalNamespaces, ","))
		}
		d, err := resolveSelection(ctx, p, k, s, i, version)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		d.Field = fmt.Sprintf("%s[%d] %s", agentapi.NetworksAnnotation, j, s.qualified())
		if prev, dup := ifnames[d.IfName]; dup {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s gets interface %q, which is already that of %s: give it another with \"%s@IFNAME\" or \"interface\"",
				what, d.IfName, prev, s.qualified())
		}
		ifnames[d.IfName] = d.describe()
		c.Delegates = append(c.Delegates, d)
	}
	if err := checkGateways(p, c.Delegates); err != nil {
		return nil, err
	}
	return p, nil
}

// defaultNetwork resolves the pod's default-network annotation: one NAD,
// in multusNamespace unless it names another namespace.
func (p *multiPod) defaultNetwork(ctx context.Context, k *multiK8sConf, m *multusConf, value, version string) (*multiDelegate, error) {
	ann := agentapi.DefaultNetworkAnnotation
	sels, err := parseSelections(ann, m.MultusNamespace, p.String(), value)
	if err != nil {
		return nil, err
	}
	if len(sels) != 1 {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s annotation %s: %q names %d networks: name exactly one NetworkAttachmentDefinition", p, ann, value, len(sels))
	}
	s := sels[0]
	if !m.mayReference(p.namespace, s.Namespace) {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s annotation %s: network %s: namespace isolation (\"namespaceIsolation\": true) lets a pod of %q select NetworkAttachmentDefinitions of its own namespace and of %q (\"globalNamespaces\") only, the default network too: name one of those, or add %q to \"globalNamespaces\"",
			p, ann, s.qualified(), p.namespace, strings.Join(m.globalNamespaces, ","), s.Namespace)
	}
	// The pod chose it: the agent's isolation applies as to the networks
	// annotation (podNamespace), unlike clusterNetwork's and defaultNetworks'.
	nad, err := p.client.NetAttachDef(ctx, p.namespace, s.Namespace, s.Name)
	if err != nil {
		if errors.Is(err, agentapi.ErrNotFound) {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s annotation %s: no NetworkAttachmentDefinition %s: create it (in %s, multusNamespace, unless the annotation names a namespace)", p, ann, s.qualified(), m.MultusNamespace)
		}
		return nil, agentErr(p, "annotation "+ann, err)
	}
	ref, err := nadBody(nad, k.ConfDir)
	if err != nil {
		return nil, fmt.Errorf("pod %s annotation %s: %w", p, ann, err)
	}
	return p.withDevice(ctx, ref, ann+" "+s.qualified(), 0, "", version)
}

// withDevice makes ref a delegate, with the pod's device of the NAD's
// resourceName (if it has one) as its deviceID.
func (p *multiPod) withDevice(ctx context.Context, ref *netRef, field string, index int, ifname, version string) (*multiDelegate, error) {
	if ref.nad != nil && ref.nad.ResourceName != "" {
		id, err := p.device(ctx, ref.nad)
		if err != nil {
			return nil, err
		}
		body, err := injectPluginFields(asList(ref.body), map[string]any{"deviceID": id, "pciBusID": id})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref.source, err)
		}
		r := *ref
		r.body = body
		d, err := r.delegate(field, index, ifname, version)
		if err != nil {
			return nil, err
		}
		d.DeviceID = id
		return d, bakeRuntimeConfig(d, map[string]any{"deviceID": id}, false)
	}
	return ref.delegate(field, index, ifname, version)
}

// device returns the next device of the NAD's resourceName that the
// kubelet allocated to the pod (several networks of one resource get one
// device each, in sorted order, as Multus hands them out).
func (p *multiPod) device(ctx context.Context, nad *agentapi.NetAttachDef) (string, error) {
	if p.devices == nil {
		devs, err := p.client.PodDevices(ctx, p.namespace, p.name, p.id)
		if err != nil {
			return "", agentErr(p, "the devices (kubelet pod-resources) for NetworkAttachmentDefinition "+nad.Namespace+"/"+nad.Name, err)
		}
		if devs == nil {
			devs = map[string][]string{}
		}
		p.devices = devs
	}
	ids := p.devices[nad.ResourceName]
	n := p.used[nad.ResourceName]
	if n >= len(ids) {
		return "", cniplug.Errorf(types.ErrInvalidNetworkConfig, "NetworkAttachmentDefinition %s/%s needs a device of resource %q (%s), but the kubelet gave pod %s %d of them and %d are in use: request one more in the pod's resources.requests/limits",
			nad.Namespace, nad.Name, nad.ResourceName, agentapi.ResourceNameAnnotation, p, len(ids), n)
	}
	p.used[nad.ResourceName] = n + 1
	return ids[n], nil
}

// asList returns a config body as a conflist (a single plugin config
// wrapped, as libcni does).
func asList(body []byte) []byte { return cniargs.AsList(body) }

// resolveSelection finds the config of a selected network: the
// NetworkAttachmentDefinition's spec.config, else (no such object, no CRD,
// or an empty config) the file in confDir whose network name is the
// selection's, as Multus does; then applies the selection's fields.
func resolveSelection(ctx context.Context, p *multiPod, k *multiK8sConf, s networkSelection, index int, version string) (*multiDelegate, error) {
	var ref *netRef
	nad, err := p.client.NetAttachDefArgs(ctx, p.namespace, s.Namespace, s.Name, s.CNIArgs)
	switch {
	case err == nil:
		if ref, err = nadBody(nad, k.ConfDir); err != nil {
			return nil, err
		}
	case errors.Is(err, agentapi.ErrNotFound):
		path, b, ferr := findNetworkFile(k.ConfDir, s.Name)
		if ferr != nil {
			return nil, ferr
		}
		if b == nil {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "no NetworkAttachmentDefinition %s and no config with \"name\": %q in %s (confDir): create one of them", s.qualified(), s.Name, k.ConfDir)
		}
		ref = &netRef{body: b, source: path}
	default:
		return nil, agentErr(p, "NetworkAttachmentDefinition "+s.qualified(), err)
	}
	if len(s.CNIArgs) > 0 {
		body, err := mergeCNIArgs(ref, s.CNIArgs)
		if err != nil {
			return nil, err
		}
		ref.body = body
	}
	if ref.nad == nil {
		ref.nad = &agentapi.NetAttachDef{Namespace: s.Namespace, Name: s.Name} // named as Multus names it
	}
	d, err := p.withDevice(ctx, ref, "", index, s.Interface, version)
	if err != nil {
		return nil, err
	}
	rc := s.runtimeConfig()
	if d.DeviceID != "" {
		delete(rc, "deviceID") // the kubelet's device wins, as in Multus
	}
	if err := bakeRuntimeConfig(d, rc, true); err != nil {
		return nil, fmt.Errorf("%s: %w", ref.source, err)
	}
	if s.DefaultRoute != nil {
		gws, _ := s.gateways()
		d.Gateways = &gws
	}
	return d, nil
}

// findNetworkFile returns the first file (*.conf, *.conflist, *.json, by
// name) of dir whose "name" is name, or a nil body when there is none.
func findNetworkFile(dir, name string) (string, []byte, error) {
	return firstConf(dir, nil, func(b []byte) bool {
		var n struct {
			Name string `json:"name"`
		}
		return json.Unmarshal(b, &n) == nil && n.Name == name
	})
}

// bakeRuntimeConfig puts the runtimeConfig entries of rc (what the
// selection asks: ips, mac, portMappings, bandwidth, infinibandGUID,
// deviceID) into the plugins of d that declare those capabilities, so that
// the record (and so DEL and CHECK) carry them too. With strict, an entry
// no plugin declares is an error: the request would be dropped silently.
func bakeRuntimeConfig(d *multiDelegate, rc map[string]any, strict bool) error {
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
	if len(missing) > 0 && strict {
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
