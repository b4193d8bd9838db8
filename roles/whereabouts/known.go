package whereabouts

import (
	"encoding/json"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	NodeFiles: []cniplug.NodeFile{{Field: "agentSocket", Default: agentapi.DefaultSocket, Socket: true,
		Fails: "every ADD fails (CNI error 11): cnibox-agent's cluster IPAM does not answer", Fix: "run cnibox-agent with --cluster-ipam on this node"}},
	Config: []any{(*ipamJSON)(nil)},

	AgentSocket: agentSocket,
}

// agentSocket is the cnibox-agent socket a plugin's config (its JSON)
// names for the ADD's cluster IPAM: its ipam section's agentSocket, else
// the default one.
func agentSocket(conf []byte) (string, bool) {
	var c struct {
		IPAM struct {
			AgentSocket string `json:"agentSocket"`
		} `json:"ipam"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return "", false
	}
	if c.IPAM.AgentSocket == "" {
		return agentapi.DefaultSocket, true
	}
	return c.IPAM.AgentSocket, true
}
