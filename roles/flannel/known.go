package flannel

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc and store rebuild (see cniplug.Known).
var known = cniplug.Known{
	NodeFiles: []cniplug.NodeFile{{Field: "subnetFile", Default: FlannelSubnetFile, Later: true,
		Fails: "ADD fails (CNI error 11) until cnibox-agent (or flanneld) writes it", Fix: "start cnibox-agent (or flanneld) on this node"}},
	Config: []any{(*flannelConf)(nil)},
	Parse:  parseOnly,

	Leftovers: &delegate.Leftovers,
}

// parseOnly is the parse of ADD, for cnibox check: the flannel fields (the
// delegate's config is built from subnet.env at ADD, and checked then).
func parseOnly(a *cniplug.Args) error {
	_, err := parseFlannelConf(a)
	return err
}
