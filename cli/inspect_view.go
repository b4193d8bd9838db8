package cli

import (
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// inspectView shows a view of the node cnibox-agent recorded in the store
// (the egress gateways', the load balancers'): get reads it, empty gives a
// missing one its empty lists (JSON [] rather than null), text prints it.
func inspectView[T any](c *ucli.Context, get func(*store.Store) (T, bool, error), empty func(*T), text func(io.Writer, T) error) error {
	var st T
	var found bool
	if err := readStore(c, func(s *store.Store) (err error) {
		st, found, err = get(s)
		return err
	}); err != nil {
		return err
	}
	if !found {
		empty(&st)
	}
	return show(c, st, text, nil)
}

// printViewHead prints the first line of such a view: whose, from when.
func printViewHead(w io.Writer, node, uplink string, takeovers uint64, updated time.Time) {
	fmt.Fprintf(w, "node %s, uplink %s, %d takeovers since the agent started, as of %s\n\n", node, uplink, takeovers, updated.Local().Format("2006-01-02 15:04:05"))
}
