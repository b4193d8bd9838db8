package multi

import (
	"encoding/json"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// known is what multi (and its Multus names) declares about itself for
// cnibox check: the fields of its config. The delegates are not looked
// into here; each is checked as the network it is when its own file is.
var known = cniplug.Known{
	NodeFiles: []cniplug.NodeFile{{Field: "agentSocket", Socket: true,
		Fails: "ADD fails (CNI error 11): cnibox-agent's pod API does not answer", Fix: "run cnibox-agent with --pod-api and --socket at that path on this node"}},
	Config: []any{(*topJSON)(nil), (*multiK8sConf)(nil)},
	Doc:    "multi",
	Parse:  parseOnly,

	Leftovers:    &delegate.Leftovers,
	WrapConflist: wrapConflist,
}

// parseOnly is the parse of ADD, for cnibox check: the Kubernetes fields,
// then the rest as parseMultiConf reads it (a clusterNetwork that only
// cnibox-agent can resolve is left for the ADD, as without a pod).
func parseOnly(a *cniplug.Args) error {
	if _, err := parseMultiK8s(a.StdinData); err != nil {
		return err
	}
	_, err := parseMultiConf(a, "")
	return err
}

// topJSON are the top-level fields parseMultiConf decodes.
type topJSON struct {
	Delegates     []json.RawMessage `json:"delegates"`
	DataDir       string            `json:"dataDir"`
	RuntimeConfig map[string]any    `json:"runtimeConfig"`
	multusFields
}

// passthruKnown: passthru reads nothing but the fields every config has.
var passthruKnown = cniplug.Known{
	Config: []any{(*struct{})(nil)},
	Doc:    "multi",
}
