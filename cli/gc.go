package cli

import (
	"fmt"
	"io"
	"slices"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/nodestate"
)

// runNodeGC removes the leftovers (or, with --dry-run, only lists them).
// The host's handle is closed after the veth deletes: the nftables
// socket's cleanup wait overlaps theirs.
func (o Options) runNodeGC(c *ucli.Context, host *netops.Handle) error {
	v, err := nodestate.ReadView(host, o.viewOptions(c))
	if err != nil {
		return err
	}
	orphans := nodestate.Find(v)
	dry := c.Bool("dry-run")
	if !dry {
		nodestate.Remove(host, o.viewOptions(c), orphans)
	}
	return show(c, nonNil(orphans), func(w io.Writer, orphans []nodestate.Orphan) error {
		printOrphans(w, orphans, dry)
		return nil
	}, func(orphans []nodestate.Orphan) bool {
		return slices.ContainsFunc(orphans, func(o nodestate.Orphan) bool { return o.Error != "" })
	})
}

func printOrphans(w io.Writer, orphans []nodestate.Orphan, dry bool) {
	if len(orphans) == 0 {
		fmt.Fprintln(w, "nothing to clean up: every record, reservation, cbx veth, masquerade entry and port mapping belongs to a live pod")
		return
	}
	tw := newTable(w)
	row(tw, "KIND", "WHAT", "DONE", "WHY")
	removed, failed := 0, 0
	for _, o := range orphans {
		done := "would remove"
		switch {
		case dry:
		case o.Skipped != "":
			done = "kept: " + o.Skipped
		case o.Error != "":
			done = "FAILED: " + o.Error
			failed++
		default:
			done = "removed"
			removed++
		}
		row(tw, o.Kind, o.Subject(), done, o.Reason)
	}
	tw.Flush()
	switch {
	case dry:
		fmt.Fprintf(w, "\n%d leftovers (dry run: nothing removed; run without --dry-run to remove them)\n", len(orphans))
	case failed > 0:
		fmt.Fprintf(w, "\n%d removed, %d failed\n", removed, failed)
	default:
		fmt.Fprintf(w, "\n%d removed\n", removed)
	}
}

// viewOptions are the store and cache directories of the command's flags
// and the roles whose declarations say what is theirs.
func (o Options) viewOptions(c *ucli.Context) nodestate.Options {
	return nodestate.Options{DataDir: c.String("data-dir"), CacheDir: c.String("cache-dir"), Roles: o.Registry}
}
