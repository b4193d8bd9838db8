package multi

import (
	"encoding/json"

	"github.com/cnibox/cnibox/cniplug"
)

// known is what multi (and its Multus names) declares about itself for
// cnibox check: the fields of its config. The delegates are not looked
// into here; each is checked as the network it is when its own file is.
var known = cniplug.Known{
	Config: []any{(*topJSON)(nil), (*multiK8sConf)(nil)},
	Doc:    "multi",
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
