package cli

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// roleInspect are the `cnibox inspect` commands the roles declare
// (cniplug.InspectCommand): listings of what a role keeps in the store.
func roleInspect(reg *cniplug.Registry) []*ucli.Command {
	var out []*ucli.Command
	for _, ic := range reg.InspectCommands() {
		flags := []ucli.Flag{dataDirFlag, jsonFlag}
		if ic.Network {
			flags = append([]ucli.Flag{networkFlag}, flags...)
		}
		out = append(out, &ucli.Command{Name: ic.Name, Usage: ic.Usage, UsageText: ic.UsageText, Flags: flags,
			Action: func(c *ucli.Context) error {
				var v any
				err := withStore(c, func(st *store.Store) (err error) {
					v, err = ic.List(st, c.String("network"))
					return err
				})
				if err != nil {
					return err
				}
				return show(c, v, ic.Print, nil)
			}})
	}
	return out
}

// withStore runs fn with the node's store, or with nil when there is none
// yet.
func withStore(c *ucli.Context, fn func(st *store.Store) error) error {
	ran := false
	err := readStore(c, func(st *store.Store) error {
		ran = true
		return fn(st)
	})
	if err != nil || ran {
		return err
	}
	return fn(nil)
}

// checkRoleNodes runs the roles' checks of the node (cniplug.NodeCheck),
// with the store open while they run.
func (d *doctor) checkRoleNodes(c *ucli.Context) {
	_ = withStore(c, func(st *store.Store) error {
		d.roles.DoctorNode(&cniplug.NodeCheck{Reporter: d, Store: st})
		return nil
	})
}
