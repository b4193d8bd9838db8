//go:build !nokube

package lbipam

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// GroupVersion is LoadBalancerIPPool's API.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "cnibox.io", Version: "v1alpha1"}
}

// Resource is LoadBalancerIPPool's plural, as the API paths name it.
const Resource = "loadbalancerippools"

// Class is cnibox's spec.loadBalancerClass: a Service of type
// LoadBalancer whose class is unset or this is the controller's.
const Class = "cnibox.io/lb"

// Condition is the type of the condition the controller keeps on the
// Services it serves (True: every address it asked for is given; False:
// the reason and message say what is missing). It marks the Service's
// ingress as the controller's.
const Condition = "cnibox.io/LoadBalancerIPAllocated"

// annotation is the value of MetalLB's annotation name (one of the
// constants above) on s: under metallb.io/ if there, else as named.
func annotation(s *corev1.Service, name string) (string, bool) {
	if v, ok := s.Annotations[AnnotationStable(name)]; ok {
		return v, true
	}
	v, ok := s.Annotations[name]
	return v, ok
}

// AnnotationStable is MetalLB's annotation name under its current prefix
// metallb.io/ (metallb.universe.tf/ is the deprecated one).
func AnnotationStable(name string) string {
	_, rest, _ := strings.Cut(name, "/")
	return "metallb.io/" + rest
}

// The conditions of a pool's status (Cilium's, in cnibox.io).
const (
	PoolConflict     = "cnibox.io/PoolConflict"
	PoolIPsTotal     = "cnibox.io/IPsTotal"
	PoolIPsAvailable = "cnibox.io/IPsAvailable"
	PoolIPsUsed      = "cnibox.io/IPsUsed"
)

// LoadBalancerIPPool is the kind.
type LoadBalancerIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PoolSpec   `json:"spec"`
	Status            PoolStatus `json:"status,omitempty"`
}

// PoolSpec is what a pool says.
type PoolSpec struct {
	Blocks            []BlockSpec           `json:"blocks"`
	ServiceSelector   *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	Disabled          bool                  `json:"disabled,omitempty"`
	AllowFirstLastIPs bool                  `json:"allowFirstLastIPs,omitempty"`
	// AutoAssign false: the pool's addresses go only to Services that ask
	// for one (spec.loadBalancerIP, AnnotationIPs) or name the pool
	// (AnnotationPool); nil: true (the CRD's default).
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// Announce says which nodes may answer on the LAN for the pool's
	// addresses (agent/lbannounce); nil: every node.
	Announce *AnnounceSpec `json:"announce,omitempty"`
}

// AnnounceSpec is spec.announce: MetalLB's L2Advertisement and Cilium's
// L2 announcement policy folded into the pool (docs/loadbalancer.md).
type AnnounceSpec struct {
	// NodeSelector selects the nodes that may announce the addresses
	// (nil: every node).
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// PoolStatus is what the controller reports.
type PoolStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LoadBalancerIPPoolList is a list of them.
type LoadBalancerIPPoolList kubeapi.List[LoadBalancerIPPool]

// DeepCopyObject implements runtime.Object.
func (p *LoadBalancerIPPool) DeepCopyObject() runtime.Object {
	out := &LoadBalancerIPPool{TypeMeta: p.TypeMeta, ObjectMeta: *p.ObjectMeta.DeepCopy()}
	out.Spec = p.Spec
	out.Spec.Blocks = slices.Clone(p.Spec.Blocks)
	out.Spec.ServiceSelector = p.Spec.ServiceSelector.DeepCopy()
	if a := p.Spec.AutoAssign; a != nil {
		v := *a
		out.Spec.AutoAssign = &v
	}
	if a := p.Spec.Announce; a != nil {
		out.Spec.Announce = &AnnounceSpec{NodeSelector: a.NodeSelector.DeepCopy()}
	}
	for _, c := range p.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, *c.DeepCopy())
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *LoadBalancerIPPoolList) DeepCopyObject() runtime.Object {
	return (*LoadBalancerIPPoolList)(kubeapi.DeepCopyList((*kubeapi.List[LoadBalancerIPPool])(l)))
}

// svcObj is what the controller's informer keeps of a Service: what the
// plan reads, and what it compares its writes with.
type svcObj struct {
	Service
	UID, ResourceVersion string
	// Cond is the controller's condition as the status has it (nil: none).
	Cond *metav1.Condition
	// Ingress is status.loadBalancer.ingress as it is (hostnames and all).
	Ingress []corev1.LoadBalancerIngress
}

// GetObjectKind implements runtime.Object.
func (s *svcObj) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing: nothing changes what
// the informer holds).
func (s *svcObj) DeepCopyObject() runtime.Object { out := *s; return &out }

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (s *svcObj) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion}
}

// serviceOf is what the controller reads of s.
func serviceOf(s *corev1.Service) *svcObj {
	sp := &s.Spec
	out := &svcObj{Service: Service{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Created: s.CreationTimestamp.Time},
		UID: string(s.UID), ResourceVersion: s.ResourceVersion, Ingress: s.Status.LoadBalancer.Ingress}
	out.Eligible = sp.Type == corev1.ServiceTypeLoadBalancer && (sp.LoadBalancerClass == nil || *sp.LoadBalancerClass == Class)
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == Condition {
			out.Cond = &s.Status.Conditions[i]
			out.Ours = true
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out.Holds = append(out.Holds, a.Unmap())
		}
	}
	if !out.Eligible {
		return out
	}
	for _, f := range sp.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out.Families = append(out.Families, 4)
		case corev1.IPv6Protocol:
			out.Families = append(out.Families, 6)
		}
	}
	if len(out.Families) == 0 { // (the API sets them; an old object may lack them)
		out.Families = []int{4}
	}
	if p := sp.IPFamilyPolicy; p != nil {
		out.Dual = *p != corev1.IPFamilyPolicySingleStack
		out.Require = *p == corev1.IPFamilyPolicyRequireDualStack
	}
	var asked []string
	if v := strings.TrimSpace(sp.LoadBalancerIP); v != "" {
		asked = append(asked, v)
	}
	if v, ok := annotation(s, AnnotationIPs); ok {
		asked = nil // (the annotation wins, as MetalLB reads them)
		for _, a := range strings.Split(v, ",") {
			asked = append(asked, strings.TrimSpace(a))
		}
	}
	for _, a := range asked {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			out.BadRequest = "address " + a + " asked for (spec.loadBalancerIP or the annotation " + AnnotationIPs + "): not an IP address; write one address, or one of each family comma separated"
			break
		}
		out.Requested = append(out.Requested, ip.Unmap())
	}
	out.SharingKey, _ = annotation(s, AnnotationShare)
	if v, _ := annotation(s, AnnotationPool); strings.TrimSpace(v) != "" {
		out.Pool = strings.TrimSpace(v)
	}
	for _, p := range sp.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		out.Ports = append(out.Ports, Port{Protocol: proto, Port: p.Port})
	}
	out.Local = sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	if len(sp.Selector) > 0 {
		keys := make([]string, 0, len(sp.Selector))
		for k, v := range sp.Selector {
			keys = append(keys, k+"="+v)
		}
		slices.Sort(keys)
		out.Selector = strings.Join(keys, ",")
	}
	return out
}

// ServiceView is what the controller keeps of s in the agent's informer
// cache (cluster.Config.LoadBalancer, read back as Service.LoadBalancer):
// a *svcObj, or nil for a Service the plan has no part in (not
// Eligible, no condition of the controller's, no address in its status:
// it neither holds nor claims one).
func ServiceView(s *corev1.Service) any {
	o := serviceOf(s)
	if !o.Eligible && !o.Ours && len(o.Ingress) == 0 {
		return nil
	}
	return o
}

// poolOf reads an API pool; a block that does not parse (the schema let it
// through, or an IPv6 start after its stop) is the pool's Conflict.
func poolOf(o *LoadBalancerIPPool) (*Pool, error) {
	p := &Pool{Name: o.Name, Created: o.CreationTimestamp.Time, Disabled: o.Spec.Disabled,
		Manual: o.Spec.AutoAssign != nil && !*o.Spec.AutoAssign}
	if o.Spec.ServiceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.ServiceSelector)
		if err != nil {
			return p, err
		}
		p.Selector = sel
	}
	for i, b := range o.Spec.Blocks {
		blk, err := ParseBlock(b, o.Spec.AllowFirstLastIPs)
		if err != nil {
			return p, &blockError{i, err}
		}
		p.Blocks = append(p.Blocks, blk)
	}
	return p, nil
}

// blockError is a block of spec.blocks that does not parse.
type blockError struct {
	i   int
	err error
}

func (e *blockError) Error() string {
	return "spec.blocks[" + strconv.Itoa(e.i) + "]: " + e.err.Error()
}
func (e *blockError) Unwrap() error { return e.err }

// Announced is what the LoadBalancer announcer (agent/lbannounce) reads
// of a pool: its addresses and the nodes that may announce them.
type Announced struct {
	Name     string
	Blocks   []Block
	Disabled bool
	// Nodes selects the nodes that may announce its addresses
	// (spec.announce.nodeSelector; absent: every node).
	Nodes labels.Selector
	// Invalid names what of the pool cannot be read ("" none): its
	// addresses are not announced.
	Invalid string
}

// ReadAnnounced reads o for the announcer.
func ReadAnnounced(o *LoadBalancerIPPool) Announced {
	a := Announced{Name: o.Name, Disabled: o.Spec.Disabled, Nodes: labels.Everything()}
	p, err := poolOf(o)
	if err != nil {
		a.Invalid = err.Error()
		return a
	}
	a.Blocks = p.Blocks
	if an := o.Spec.Announce; an != nil && an.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(an.NodeSelector)
		if err != nil {
			a.Invalid = "spec.announce.nodeSelector: " + err.Error()
			a.Nodes = labels.Nothing()
			return a
		}
		a.Nodes = sel
	}
	return a
}

// Size is the number of addresses of a's blocks (a float, as Pool.Size).
func (a Announced) Size() float64 { return (&Pool{Blocks: a.Blocks}).Size() }
