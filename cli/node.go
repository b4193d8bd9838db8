package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// What the commands that read the node open: its store and its network
// namespace.

// openStore opens the store of the --data-dir flag (or the environment's)
// without creating it, and returns its directory too. A store that was
// never created is an error wrapping store.ErrNotFound.
func openStore(c *ucli.Context) (*store.Store, string, error) {
	dir := store.Dir(c.String("data-dir"))
	st, err := store.OpenWith(dir, store.Options{NoCreate: true})
	return st, dir, err
}

// readStore opens the store (see openStore), runs fn and closes it again. A
// store that was never created reads as empty: fn is not called and the
// error is nil.
func readStore(c *ucli.Context, fn func(st *store.Store) error) error {
	st, _, err := openStore(c)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// onHost runs fn with a handle on the node's own network namespace.
func onHost(fn func(host *netops.Handle) error) error {
	host, err := netops.Open("")
	if err != nil {
		return err
	}
	defer host.Close()
	return fn(host)
}

// withHost is the action of a command that reads the node's kernel state:
// run gets a handle on the node's namespace, closed when run returns.
func withHost(run func(c *ucli.Context, host *netops.Handle) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		return onHost(func(host *netops.Handle) error { return run(c, host) })
	}
}
