package tuning

import (
	"github.com/cnibox/cnibox/cniplug"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	Config: []any{(*tuningConf)(nil)},
	Doctor: doctor,

	Leftovers: &leftovers,
}

// leftovers: a stale record restores nothing (the pod is gone) and is
// dropped. Its netns speaks for its container.
var leftovers = cniplug.Leftovers{
	Rank:    20,
	Kinds:   []string{bucket},
	Records: []cniplug.RecordKind{{Kind: bucket, Bucket: bucket, Witness: true}},
}
