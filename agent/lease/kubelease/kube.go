//go:build !nokube

// Package kubelease is the Kubernetes lease backend of cnibox-agent
// (--kube-subnet-mgr): a node's lease is its node.spec.podCIDR(s), which
// kube-controller-manager's node IPAM controller assigns out of the cluster
// CIDR; what the node publishes goes into flannel's node annotations
// (flannel.alpha.coreos.com/backend-data, backend-type, public-ip,
// kube-subnet-manager, ...), so cnibox and flannel nodes interoperate in one
// cluster. Peers come from the agent's informer cache of the nodes
// (agent/cluster), which keeps of each node what makes its lease
// (watch.go).
//
// It links client-go: only cmd/cnibox-agent may import it.
package kubelease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/netconf"
)

// DefaultAnnotationPrefix is flannel's.
const DefaultAnnotationPrefix = "flannel.alpha.coreos.com"

// Config configures the Kubernetes backend.
type Config struct {
	kubeapi.Cluster
	// AnnotationPrefix defaults to DefaultAnnotationPrefix.
	AnnotationPrefix string
	NetConf          *netconf.Config
	// SetNodeNetworkUnavailable sets the node's NetworkUnavailable
	// condition to False once the network is up (flannel's
	// --set-node-network-unavailable, default true).
	SetNodeNetworkUnavailable bool
	// Cache is the agent's informer cache (agent/cluster), made with
	// NodeAnnotations holding the prefix's Annotations.Peers; nil: one of
	// the backend's own, run by Watch.
	Cache *cluster.Cache
	Log   *slog.Logger
}

// Manager is the Kubernetes lease backend.
//
// It talks to the API with client-go's REST client, decoding only the parts
// of a Node it uses (agent/kubeapi): the generated clientset would link and
// initialise every API group, which doubles the agent's resident memory.
// The peers come from the informer cache.
type Manager struct {
	c rest.Interface // core/v1
	// cache holds the peers' Nodes (nil in tests that do not watch);
	// ownCache: Watch runs it.
	cache    *cluster.Cache
	ownCache bool
	// timeout bounds each request (RequestTimeout unless a test sets it).
	timeout time.Duration
	node    string
	an      Annotations
	cfg     *netconf.Config
	log     *slog.Logger
	// setUnavailable: CompleteLease sets NetworkUnavailable False.
	setUnavailable bool
}

var _ lease.Manager = (*Manager)(nil)

// New builds the client. The node name is Config.NodeName, else $NODE_NAME,
// else the hostname.
func New(c Config) (*Manager, error) {
	if c.NetConf == nil {
		return nil, errors.New("kube: no network configuration (--net-config-path)")
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.AnnotationPrefix == "" {
		c.AnnotationPrefix = DefaultAnnotationPrefix
	}
	an, err := NewAnnotations(c.AnnotationPrefix)
	if err != nil {
		return nil, err
	}
	node, cs, err := c.Connect("kube", &kubeapi.Node{}, &kubeapi.NodeList{})
	if err != nil {
		return nil, err
	}
	m := &Manager{c: cs, cache: c.Cache, timeout: RequestTimeout, node: node, an: an, cfg: c.NetConf, log: c.Log,
		setUnavailable: c.SetNodeNetworkUnavailable}
	if m.cache == nil {
		m.cache = cluster.NewWith(cluster.Config{Cluster: c.Cluster, Log: c.Log, NodeAnnotations: an.Peers()})
		m.ownCache = true
	}
	kept := m.cache.NodeAnnotations()
	for _, a := range an.Peers() {
		if !slices.Contains(kept, a) {
			return nil, fmt.Errorf("kube: the informer cache does not keep the nodes' annotation %s (cluster.Config.NodeAnnotations: the annotation prefix's Peers)", a)
		}
	}
	return m, nil
}

// RequestTimeout bounds one request to the API server (a read or a patch of
// this node), so a server that accepts and never answers cannot hold the
// agent's loop.
const RequestTimeout = 30 * time.Second

// getNode reads this node.
func (m *Manager) getNode(ctx context.Context) (*kubeapi.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	n := &kubeapi.Node{}
	err := kubeapi.Get(ctx, m.c, m.ref(), n)
	return n, err
}

// ref names this node.
func (m *Manager) ref() kubeapi.Ref { return kubeapi.Ref{Resource: "nodes", Name: m.node} }

// Name returns "kube".
func (m *Manager) Name() string { return "kube" }

// NetworkConfig returns the configuration given by --net-config-path.
func (m *Manager) NetworkConfig(context.Context) (*netconf.Config, error) { return m.cfg, nil }

// Existing returns this node's lease as its annotations describe it.
func (m *Manager) Existing(ctx context.Context, cfg *netconf.Config, _ netip.Addr) (lease.Lease, bool, error) {
	n, err := m.getNode(ctx)
	if err != nil {
		return lease.Lease{}, false, fmt.Errorf("kube: get node %s: %w", m.node, err)
	}
	l, err := m.nodeLease(n, false)
	if err != nil {
		return lease.Lease{}, false, nil //nolint:nilerr // no usable annotations yet: no lease
	}
	return l, true, nil
}

// Acquire waits for the node IPAM controller to assign this node's
// podCIDR(s), then publishes the attributes in the node's annotations.
func (m *Manager) Acquire(ctx context.Context, req lease.AcquireRequest) (lease.Lease, error) {
	logged := false
	for {
		n, err := m.getNode(ctx)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return lease.Lease{}, fmt.Errorf("kube: node %s does not exist: register the node (kubelet), or set --node-name / $NODE_NAME to its name", m.node)
			}
			return lease.Lease{}, fmt.Errorf("kube: get node %s: %w", m.node, err)
		}
		sn4, sn6, err := podCIDRs(n)
		if err != nil {
			return lease.Lease{}, err
		}
		if (req.Config.EnableIPv4 && !sn4.IsValid()) || (req.Config.EnableIPv6 && !sn6.IsValid()) {
			if !logged {
				m.log.Warn("waiting for the node's podCIDR: kube-controller-manager assigns it with --allocate-node-cidrs", "node", m.node)
				logged = true
			}
			select {
			case <-ctx.Done():
				return lease.Lease{}, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		l := lease.Lease{Attrs: req.Attrs}
		if req.Config.EnableIPv4 {
			if !req.Config.Network.Contains(sn4.Addr()) || sn4.Bits() < req.Config.Network.Bits() {
				return lease.Lease{}, fmt.Errorf("kube: node %s has podCIDR %s outside the Network %s of the net-conf.json: make --cluster-cidr and Network agree", m.node, sn4, req.Config.Network)
			}
			l.Subnet = sn4
		}
		if req.Config.EnableIPv6 {
			if !req.Config.IPv6Network.Contains(sn6.Addr()) {
				return lease.Lease{}, fmt.Errorf("kube: node %s has IPv6 podCIDR %s outside the IPv6Network %s of the net-conf.json", m.node, sn6, req.Config.IPv6Network)
			}
			l.Subnet6 = sn6
		}
		if err := m.publish(ctx, n, req.Attrs); err != nil {
			return lease.Lease{}, err
		}
		return l, nil
	}
}

// publish writes the node's annotations when they differ.
func (m *Manager) publish(ctx context.Context, n *kubeapi.Node, a lease.Attrs) error {
	want := m.an.published(n, a)
	same := n.Labels[MetaLabel] == "true"
	for k, v := range want {
		same = same && n.Annotations[k] == v
	}
	if same {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	// through nodes/status, as flanneld: kube-flannel.yml's ClusterRole
	// allows nothing else
	if err := kubeapi.PatchStatusMetadata(ctx, m.c, m.ref(), map[string]any{"annotations": want, "labels": map[string]string{MetaLabel: "true"}}); err != nil {
		return fmt.Errorf("kube: annotate node %s: %w", m.node, err)
	}
	m.log.Info("published this node's overlay attributes", "node", m.node, "annotations", want)
	return nil
}

// Renew does nothing: a node's podCIDR does not expire.
func (m *Manager) Renew(_ context.Context, l lease.Lease) (lease.Lease, error) { return l, nil }

// nodeLease reads a node's lease from its podCIDRs and annotations. With
// managedOnly, nodes without kube-subnet-manager=true are skipped (they run
// no overlay agent).
func (m *Manager) nodeLease(n *kubeapi.Node, managedOnly bool) (lease.Lease, error) {
	if managedOnly && n.Annotations[m.an.SubnetKubeManaged] != "true" {
		return lease.Lease{}, errors.New("not managed")
	}
	sn4, sn6, err := podCIDRs(n)
	if err != nil {
		return lease.Lease{}, err
	}
	return m.leaseOf(n.Name, sn4, sn6, n.Annotations)
}

// peerLease reads a peer's lease from what the informer cache keeps of its
// Node; nodes without kube-subnet-manager=true are skipped.
func (m *Manager) peerLease(n *cluster.Node) (lease.Lease, error) {
	if n.Annotations[m.an.SubnetKubeManaged] != "true" {
		return lease.Lease{}, errors.New("not managed")
	}
	var sn4, sn6 netip.Prefix
	for _, p := range n.PodCIDRs {
		if p.Addr().Is4() {
			sn4 = p
		} else {
			sn6 = p
		}
	}
	return m.leaseOf(n.Name, sn4, sn6, n.Annotations)
}

// leaseOf is the lease of node name with pod CIDRs sn4 and sn6 and
// annotations ann.
func (m *Manager) leaseOf(name string, sn4, sn6 netip.Prefix, ann map[string]string) (lease.Lease, error) {
	var err error
	l := lease.Lease{Attrs: lease.Attrs{BackendType: ann[m.an.BackendType]}}
	if m.cfg.EnableIPv4 {
		l.Subnet = sn4
	}
	if m.cfg.EnableIPv6 {
		l.Subnet6 = sn6
	}
	if !l.Subnet.IsValid() && !l.Subnet6.IsValid() {
		return lease.Lease{}, errors.New("no podCIDR")
	}
	for _, f := range m.an.families(&l.Attrs) {
		if s := ann[f.publicIP]; s != "" {
			if *f.ip, err = netip.ParseAddr(s); err != nil {
				return lease.Lease{}, fmt.Errorf("node %s annotation %s: %w", name, f.publicIP, err)
			}
		}
		*f.raw = rawData(ann[f.data])
		if l.Attrs.BackendType != lease.BackendVXLAN && l.Attrs.BackendType != "" {
			continue
		}
		if *f.vni, *f.mac, err = lease.ParseVXLANData([]byte(ann[f.data])); err != nil {
			return lease.Lease{}, fmt.Errorf("node %s annotation %s: %w", name, f.data, err)
		}
	}
	return l, nil
}

// podCIDRs returns a node's IPv4 and IPv6 pod CIDRs.
func podCIDRs(n *kubeapi.Node) (sn4, sn6 netip.Prefix, err error) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return sn4, sn6, fmt.Errorf("node %s podCIDR %q: %w", n.Name, s, err)
		}
		if p.Addr().Is4() {
			sn4 = p.Masked()
		} else {
			sn6 = p.Masked()
		}
	}
	return sn4, sn6, nil
}

// rawData returns an annotation's backend data, nil for none or "null".
func rawData(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return nil
	}
	return json.RawMessage(s)
}
