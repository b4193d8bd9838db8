package dhcp

import (
	"context"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// shortTimeout bounds the calls that send at most one packet (DEL, CHECK,
// GC, STATUS).
const shortTimeout = 30 * time.Second

// del asks the daemon to release the attachment's lease; a lease the daemon
// does not hold is success. A daemon that does not answer fails DEL (11),
// so that the runtime retries instead of leaking the lease.
func del(ctx context.Context, a *cniplug.Args, cfg *config) error {
	_, err := call(ctx, cfg, request(proto.OpDel, a, cfg), shortTimeout, types.ErrTryAgainLater)
	return err
}

// gc asks the daemon to release the network's leases that are not in the
// runtime's list of valid attachments.
func gc(ctx context.Context, a *cniplug.Args, cfg *config) error {
	req := &proto.Request{Op: proto.OpGC, Network: a.Conf.Name}
	for _, k := range a.Conf.GCKeep() {
		req.Keep = append(req.Keep, proto.Attachment{ContainerID: k.ContainerID, IfName: k.IfName})
	}
	_, err := call(ctx, cfg, req, shortTimeout, types.ErrTryAgainLater)
	return err
}

// status fails with code 50 when the daemon does not answer.
func status(ctx context.Context, _ *cniplug.Args, cfg *config) error {
	_, err := call(ctx, cfg, &proto.Request{Op: proto.OpStatus}, 5*time.Second, cniplug.CodeNotReady)
	return err
}
