package delegate

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/delegaterec"
)

// Leftovers are the meta roles' delegate records as leftovers
// (cniplug.Leftovers), one declaration that flannel's and multi's Known
// share (the records are in one bucket): a stale record is dropped, and
// the delegates' own leftovers are the node's (nodestate rules 1 to 4).
// A record's netns speaks for its container, and the runtime caches a
// delegate's attachment under the meta role's network, not the
// delegate's.
var Leftovers = cniplug.Leftovers{
	Rank:    40,
	Kinds:   []string{kindRecord},
	Records: []cniplug.RecordKind{{Kind: kindRecord, Bucket: delegaterec.Bucket, Witness: true, Meta: true}},
}

const kindRecord = "delegate"
