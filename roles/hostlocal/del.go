package hostlocal

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
)

// del releases every address of the attachment (ipamrole.Pool.Del: nothing
// to release, or no store at all, is success).
func del(_ context.Context, a *cniplug.Args, cfg *config) error {
	err := cfg.Del(a)
	fault.Point("hostlocal/del/after-release")
	if err != nil {
		return err
	}
	// the attachment's records in the reference host-local's directory,
	// whichever plugin wrote them
	ref, err := openRefStore(a, cfg.DataDir)
	if err != nil {
		return err
	}
	defer ref.close()
	return ref.release(a.ContainerID, a.IfName)
}

// gc releases every reservation of the network whose attachment is not in
// the config's cni.dev/valid-attachments (or cni.dev/attachments).
func gc(_ context.Context, a *cniplug.Args, cfg *config) error { return cfg.GC(a) }
