package cli

import (
	"fmt"
	"io"
	"slices"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/nodestate"
)

func gcCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "gc",
		Usage: "remove what pods that are gone left behind: records, reservations, host veths, masquerade entries, port mappings",
		UsageText: "cnibox gc [--dry-run] [--data-dir DIR] [--cache-dir DIR] [--json]\n\n" +
			"Reconciles the store and the kernel with reality, without a runtime's help:\n" +
			"  - endpoint records whose netns is gone or that predate the last reboot, with their host veth,\n" +
			"    masquerade entries and address reservations;\n" +
			"  - reservations without an endpoint record, when reserved before the last reboot or when the\n" +
			"    runtime's libcni cache says their netns is gone (host-local alone reserves without a record,\n" +
			"    so a reservation is never released on absence of a record alone);\n" +
			"  - host veths named cbx* and masquerade entries that nothing live or reserved accounts for;\n" +
			"  - portmap, tuning, bandwidth (with its ifb) and flannel/multi delegate records whose attachment\n" +
			"    is gone (its netns, its endpoint's netns, the container's netns, or an earlier boot), with\n" +
			"    their port mappings; port mapping elements that no record, endpoint or cache entry explains;\n" +
			"    cbw* ifb devices that no bandwidth record names.\n" +
			"Example: cnibox gc --dry-run",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "print what would be removed, remove nothing"},
			dataDirFlag,
			cacheFlag,
			jsonFlag,
		},
		Action: withHost(runNodeGC),
	}
}

// runNodeGC removes the leftovers (or, with --dry-run, only lists them).
// The host's handle is closed after the veth deletes: the nftables
// socket's cleanup wait overlaps theirs.
func runNodeGC(c *ucli.Context, host *netops.Handle) error {
	v, err := nodestate.ReadView(host, viewOptions(c))
	if err != nil {
		return err
	}
	orphans := nodestate.Find(v)
	dry := c.Bool("dry-run")
	if !dry {
		nodestate.Remove(host, c.String("data-dir"), orphans)
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

// viewOptions are the store and cache directories of the command's flags.
func viewOptions(c *ucli.Context) nodestate.Options {
	return nodestate.Options{DataDir: c.String("data-dir"), CacheDir: c.String("cache-dir")}
}
