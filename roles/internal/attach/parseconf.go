package attach

import "github.com/cnibox/cnibox/cniplug"

// ParseConfig is the parse of ADD, for `cnibox check` (a cniplug.ConfigParser).
func (v *HostVerbs[C]) ParseConfig(a *cniplug.Args) error {
	_, err := v.Parse(a)
	return err
}
