package dhcp

import (
	"context"
	"errors"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// callTimeout bounds one exchange with the daemon: an ADD waits for the
// daemon's own DHCP timeout (its -timeout, 10 s by default), so this is
// only the guard against a daemon that hangs.
const callTimeout = 2 * time.Minute

// request builds the request of op for the attachment of a.
func request(op string, a *cniplug.Args, cfg *config) *proto.Request {
	return &proto.Request{
		Op: op, Network: a.Conf.Name, ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns,
		Pod: a.CNIArgs.Pod(), Request: cfg.Request, Provide: cfg.Provide,
	}
}

// call sends req to the daemon and turns a failed answer into a coded error.
// notUp is the code when the daemon does not answer.
func call(ctx context.Context, cfg *config, req *proto.Request, timeout time.Duration, notUp uint) (*proto.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := proto.Call(ctx, cfg.Socket, req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, cniplug.Errorf(notUp, "dhcp: the dhcp daemon at %s did not answer %s within %s: see its log", cfg.Socket, req.Op, timeout)
		}
		return nil, cniplug.Errorf(notUp, "dhcp: the dhcp daemon does not answer at %s (ipam.daemonSocketPath): %v: start it with `dhcp daemon` (or its systemd socket, see docs/roles/dhcp.md)", cfg.Socket, err)
	}
	if resp.Error != "" {
		code := resp.Code
		if code == 0 {
			code = types.ErrInternal
		}
		return nil, cniplug.Errorf(code, "dhcp: %s", resp.Error)
	}
	return resp, nil
}
