package lower

import "github.com/cnibox/cnibox/cniplug"

// ParseConfig is the parse of ADD, for `cnibox check` (a cniplug.ConfigParser).
func (s *Spec) ParseConfig(a *cniplug.Args) error {
	_, err := s.parseConf(a)
	return err
}

// ParseConfig is the parse of ADD, for `cnibox check` (a cniplug.ConfigParser).
func (o *Own[C]) ParseConfig(a *cniplug.Args) error {
	_, err := o.Parse(a)
	return err
}
