package static

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// add returns the configured addresses, routes and DNS.
func add(_ context.Context, _ *cniplug.Args, cfg *config) (types.Result, error) {
	return ipamrole.Result(cfg.Addresses, cfg.Routes, cfg.DNS), nil
}
