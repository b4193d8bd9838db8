package cloudipam

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Config: []any{(*ipamJSON)(nil)},
	Doc:    "cloud-ipam",

	KeptPools: keptPools,
}
