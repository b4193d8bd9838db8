package main

import (
	"flag"

	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/agent/podresources"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// podAPIFlags configure the pod API (the multi CNI role's window on the
// Kubernetes API: pod annotations, NetworkAttachmentDefinitions,
// network-status).
type podAPIFlags struct {
	serve  bool
	only   bool
	socket string
	group  int // besides root, this group may call (-1: root only)
	// namespaceIsolation: NADs only from the pod's namespace and default.
	namespaceIsolation bool
	// nadTrustList is --nad-trusted-namespaces; nadTrust, what validate
	// read of it.
	nadTrustList string
	nadTrust     podapi.NADTrust
	// podResources is the kubelet's pod-resources socket ("" : none).
	podResources string
	multusConf   multusConfFlags // multusconf.go
}

func (p *podAPIFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.serve, "pod-api", false, "also serve the pod API for the multi CNI role on --socket: watches this node's pods (--node-name) "+
		"through --kubeconfig-file / in-cluster config, with either lease backend (cnibox)")
	fs.BoolVar(&p.only, "pod-api-only", false, "serve only the pod API (no lease, no overlay): the node daemon of a Multus-style setup "+
		"whose pod network is something else (cnibox)")
	fs.StringVar(&p.socket, "socket", agentapi.DefaultSocket, "unix socket of the pod API (cnibox)")
	fs.IntVar(&p.group, "pod-api-group", -1, "numeric group ID whose processes may call the pod API besides root: the socket is 0660 with this group instead of 0600 root's (the agent needs CAP_CHOWN unless it runs in the group), and a caller must have it as its group or a supplementary one (SO_PEERCRED, SO_PEERGROUPS) (cnibox)")
	fs.StringVar(&p.podResources, "pod-resources-socket", podresources.DefaultSocket, "the kubelet's pod-resources API socket: where the pod API finds the device a NetworkAttachmentDefinition's "+
		"k8s.v1.cni.cncf.io/resourceName gave the pod (deviceID for host-device, SR-IOV); empty: none (cnibox)")
	p.multusConf.register(fs)
	fs.StringVar(&p.nadTrustList, "nad-trusted-namespaces", podapi.DefaultNADTrust, "comma separated namespaces whose NetworkAttachmentDefinitions may use any role and field "+
		"(host paths, sockets, endpoints, node devices, roles that make objects in the node's namespace: Multus' model, where a NAD's author is root on the node); "+
		"the NADs of other namespaces are held to the allowlist of docs/security.md. \"*\": every namespace; \"\": none (cnibox)")
	fs.BoolVar(&p.namespaceIsolation, "pod-api-namespace-isolation", false, "honour a NetworkAttachmentDefinition a pod selects only from the pod's namespace and default, whatever the multi config says (Multus' namespaceIsolation, off by default as in Multus; the config's namespaceIsolation and globalNamespaces work without it) (cnibox)")
}

// enabled reports whether the pod API runs.
func (p *podAPIFlags) enabled() bool { return p.serve || p.only }
