package cluster

import (
	"net/netip"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ServiceCIDR is what the Services proxy reads of a ServiceCIDR
// (networking.k8s.io/v1, cluster-scoped): its ranges. kube-proxy drops
// new connections to an address of them that no Service has.
type ServiceCIDR struct {
	Name string
	// CIDRs are spec.cidrs that parse (masked, unmapped).
	CIDRs           []netip.Prefix
	ResourceVersion string
}

// Key is its name (cluster-scoped).
func (c *ServiceCIDR) Key() string { return c.Name }

// GetObjectKind implements runtime.Object.
func (c *ServiceCIDR) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object (sharing, as Service).
func (c *ServiceCIDR) DeepCopyObject() runtime.Object {
	out := *c
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor.
func (c *ServiceCIDR) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: c.Name, ResourceVersion: c.ResourceVersion}
}

// ServiceCIDRFromAPI returns what the proxy reads of c; ranges that do
// not parse are left out.
func ServiceCIDRFromAPI(c *networkingv1.ServiceCIDR) *ServiceCIDR {
	out := &ServiceCIDR{Name: c.Name, ResourceVersion: c.ResourceVersion}
	for _, s := range c.Spec.CIDRs {
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
			out.CIDRs = append(out.CIDRs, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked())
		}
	}
	return out
}
