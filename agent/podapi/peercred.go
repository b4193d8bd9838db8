package podapi

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// NoGroup allows root only (Access.GID).
const NoGroup = -1

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
}

// checkPeer reports an error unless the process at the other end of conn
// (SO_PEERCRED) runs as root, or with group gid as its real group. The
// socket's file mode is a second line: a caller that gets past it (a
// changed mode, a shared mount) still has to be root or in the group.
func checkPeer(conn net.Conn, gid int) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	if cred.Uid == 0 || (gid >= 0 && int(cred.Gid) == gid) {
		return nil
	}
	return fmt.Errorf("peer pid %d uid %d gid %d is neither root nor in the pod API's group (--pod-api-group)", cred.Pid, cred.Uid, cred.Gid)
}
