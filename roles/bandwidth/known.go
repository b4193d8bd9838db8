package bandwidth

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Config: []any{(*bwConfJSON)(nil)},
	Capabilities: []cniplug.Capability{{Name: "bandwidth",
		Lost:   "the runtime passes no limits (Kubernetes: the pods' kubernetes.io/ingress-bandwidth and egress-bandwidth annotations) and the config sets none: no pod is shaped",
		Unless: []string{"ingressRate", "ingressBurst", "egressRate", "egressBurst"}}},
	Leftovers: &leftovers,
}
