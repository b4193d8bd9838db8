package podapi

import (
	"context"
	"fmt"
	"net"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/unixsock"
)

// NoGroup allows root only (Access.GID).
const NoGroup = unixsock.NoGroup

// Access is who may call the pod API and what it honours.
type Access struct {
	// GID: besides root, processes of this group may call (NoGroup: none).
	GID int
	// NamespaceIsolation: a NAD is honoured only from the pod's namespace
	// (Request.PodNamespace) and "default", as Multus' namespaceIsolation.
	NamespaceIsolation bool
	// NADTrust names the namespaces whose NADs may use any role and field
	// (nadpolicy.go); the NADs of the others are held to the allowlist.
	NADTrust NADTrust
	// IPAM, when set, answers the cluster IPAM operations
	// (agentapi.OpIPAM*: the whereabouts role; agent/clusteripam).
	IPAM func(ctx context.Context, req agentapi.Request) *agentapi.Response
	// Policy, when set, answers the NetworkPolicy operations
	// (agentapi.OpPolicy*: a pod's ADD and DEL; agent/policy's Admitter).
	Policy func(ctx context.Context, req agentapi.Request) *agentapi.Response
}

// checkPeer reports an error unless the process at the other end of conn
// runs as root, or has the group gid (its own or a supplementary one). The
// socket's file mode is a second line: a caller that gets past it (a
// changed mode, a shared mount) still has to be root or in the group.
func checkPeer(conn net.Conn, gid int) error {
	if err := unixsock.CheckPeer(conn, gid); err != nil {
		return fmt.Errorf("%w (the pod API's group: --pod-api-group)", err)
	}
	return nil
}
