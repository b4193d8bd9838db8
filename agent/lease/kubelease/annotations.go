//go:build !nokube

package kubelease

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/agent/lease"
)

// Annotations are the names of flannel's node annotations under a prefix.
type Annotations struct {
	SubnetKubeManaged, BackendData, BackendV6Data, BackendType   string
	PublicIP, PublicIPv6, PublicIPOverwrite, PublicIPv6Overwrite string
	// NodePublicIP/NodePublicIPv6 are set by the operator: this node's
	// public addresses, read at start, winning over --public-ip(v6).
	NodePublicIP, NodePublicIPv6 string
	// PodCIDRs is cnibox's, next to flannel's: the node's podCIDRs, comma
	// separated, so that peers find the whole lease in the metadata.
	PodCIDRs string
}

var prefixRE = regexp.MustCompile(`^(?:[a-z0-9_-]+\.)+[a-z0-9_-]+/(?:[a-z0-9_-]+-)?$`)

// NewAnnotations returns the annotation names under prefix, as flannel
// builds them.
func NewAnnotations(prefix string) (Annotations, error) {
	if strings.Count(prefix, "/") > 1 {
		return Annotations{}, fmt.Errorf("annotation prefix %q: at most one slash", prefix)
	}
	if !strings.Contains(prefix, "/") {
		prefix += "/"
	}
	if !strings.HasSuffix(prefix, "/") && !strings.HasSuffix(prefix, "-") {
		prefix += "-"
	}
	if !prefixRE.MatchString(prefix) {
		return Annotations{}, fmt.Errorf("annotation prefix %q: want fqdn/[0-9a-z-_]*", prefix)
	}
	return Annotations{
		SubnetKubeManaged:   prefix + "kube-subnet-manager",
		BackendData:         prefix + "backend-data",
		BackendV6Data:       prefix + "backend-v6-data",
		BackendType:         prefix + "backend-type",
		PublicIP:            prefix + "public-ip",
		PublicIPv6:          prefix + "public-ipv6",
		PublicIPOverwrite:   prefix + "public-ip-overwrite",
		PublicIPv6Overwrite: prefix + "public-ipv6-overwrite",
		NodePublicIP:        prefix + "node-public-ip",
		NodePublicIPv6:      prefix + "node-public-ipv6",
		PodCIDRs:            prefix + "pod-cidrs",
	}, nil
}

// Peers returns every annotation name the backend reads of a peer's Node
// (what the informer cache keeps of the nodes: cluster.Config's
// NodeAnnotations).
func (an Annotations) Peers() []string {
	return []string{an.SubnetKubeManaged, an.BackendData, an.BackendV6Data, an.BackendType,
		an.PublicIP, an.PublicIPv6, an.PublicIPOverwrite, an.PublicIPv6Overwrite, an.PodCIDRs}
}

// family is one IP family's annotations and the lease attributes they
// carry.
type family struct {
	data, publicIP, overwrite string // annotation names
	vni                       *int
	mac                       *net.HardwareAddr
	ip                        *netip.Addr
	raw                       *json.RawMessage // the backend data as published
}

// families returns the IPv4 and the IPv6 family of a's attributes.
func (an Annotations) families(a *lease.Attrs) [2]family {
	return [2]family{
		{an.BackendData, an.PublicIP, an.PublicIPOverwrite, &a.VNI, &a.VTEPMAC, &a.PublicIP, &a.Data},
		{an.BackendV6Data, an.PublicIPv6, an.PublicIPv6Overwrite, &a.VNI6, &a.VTEPMAC6, &a.PublicIPv6, &a.Data6},
	}
}

// published returns the annotations node n gets for attributes a.
func (an Annotations) published(n *kubeapi.Node, a lease.Attrs) map[string]string {
	want := map[string]string{
		an.BackendType:       a.BackendType,
		an.SubnetKubeManaged: "true",
	}
	// Which families' data and public address flannel writes (its
	// kubeSubnetManager.AcquireLease): IPv4's whenever the backend is not
	// vxlan or has data, IPv6's for vxlan with data, wireguard with data
	// and an IPv6 address, host-gw with an IPv6 address. No data is
	// written as "null", as flannel writes it.
	for i, f := range an.families(&a) {
		bd := a.DataJSON(i == 1)
		if !f.ip.IsValid() || (len(bd) == 0 && a.BackendType == lease.BackendVXLAN) {
			continue
		}
		if i == 1 && len(bd) == 0 && a.BackendType != lease.BackendHostGW {
			continue
		}
		if len(bd) == 0 {
			bd = json.RawMessage("null")
		}
		want[f.data] = string(bd)
		want[f.publicIP] = f.ip.String()
		if o := n.Annotations[f.overwrite]; o != "" {
			want[f.publicIP] = o
		}
	}
	if cidrs := n.Spec.PodCIDRs; len(cidrs) > 0 {
		want[an.PodCIDRs] = strings.Join(cidrs, ",")
	} else if n.Spec.PodCIDR != "" {
		want[an.PodCIDRs] = n.Spec.PodCIDR
	}
	return want
}
