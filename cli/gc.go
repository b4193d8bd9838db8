package cli

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
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
		Action: runNodeGC,
	}
}

// readNodeView reads the store, libcni's cache and the kernel.
func readNodeView(c *ucli.Context, host *netops.Handle) (nodeView, error) {
	v := nodeView{BootID: store.BootID(), Netns: map[string]bool{}}
	err := readStore(c, func(st *store.Store) error {
		var err error
		if v.Endpoints, err = st.Endpoints(""); err != nil {
			return err
		}
		if v.IPAM, err = st.IPAMViews(""); err != nil {
			return err
		}
		return readRecordView(st, &v.recordView)
	})
	if err != nil {
		return v, err
	}
	if dir := c.String("cache-dir"); dir != "" {
		cached, err := libcni.NewCNIConfigWithCacheDir(nil, dir, nil).GetCachedAttachments("")
		if err != nil {
			return v, fmt.Errorf("read libcni's cache in %s: %w", dir, err)
		}
		v.Cached = cached
	}
	if v.Links, err = host.Links(); err != nil {
		return v, err
	}
	if v.Masq, err = host.MasqEntries(); err != nil {
		return v, err
	}
	if v.PortMapElems, err = host.PortMapEntries(); err != nil {
		return v, err
	}
	probe := func(path string) {
		if path == "" {
			return
		}
		if _, done := v.Netns[path]; done {
			return
		}
		if ok, err := netops.NetnsExists(path); err == nil {
			v.Netns[path] = ok
		}
	}
	for _, ep := range v.Endpoints {
		probe(ep.Netns)
	}
	for _, a := range v.Cached {
		probe(a.NetNS)
	}
	for _, r := range v.Tuning {
		probe(r.Netns)
	}
	for _, r := range v.Delegates {
		probe(r.Netns)
	}
	return v, nil
}

func runNodeGC(c *ucli.Context) error {
	host, err := netops.Open("")
	if err != nil {
		return err
	}
	// Closed after the veth deletes: the nftables socket's cleanup wait
	// overlaps theirs.
	defer host.Close()
	v, err := readNodeView(c, host)
	if err != nil {
		return err
	}
	orphans := findOrphans(v)
	dry := c.Bool("dry-run")
	if !dry {
		removeOrphans(c, host, orphans)
	}
	if c.Bool("json") {
		if orphans == nil {
			orphans = []orphan{}
		}
		if err := writeJSON(c.App.Writer, orphans); err != nil {
			return err
		}
	} else {
		printOrphans(c, orphans, dry)
	}
	for _, o := range orphans {
		if o.Error != "" {
			return &exitError{code: 1}
		}
	}
	return nil
}

// removeOrphans removes each orphan and records what happened in it:
// port mappings and masquerade entries first, then veths and ifbs, then the
// store (the chained and meta roles' records, reservations, then endpoint
// records), so a failure part way leaves records that a rerun finds again.
func removeOrphans(c *ucli.Context, host *netops.Handle, orphans []orphan) {
	set := func(o *orphan, err error) {
		o.Done = err == nil
		if err != nil {
			o.Error = err.Error()
		}
	}
	removePortMapOrphans(c.String("data-dir"), host, orphans)
	var masq []netip.Addr
	for _, o := range orphans {
		if o.Kind == "masquerade" {
			masq = append(masq, o.Addr)
		}
	}
	if len(masq) > 0 {
		err := host.DeleteMasq(masq)
		for i := range orphans {
			if orphans[i].Kind == "masquerade" {
				set(&orphans[i], err)
			}
		}
	}
	for i := range orphans {
		o := &orphans[i]
		if o.Kind != "veth" {
			continue
		}
		err := host.DeleteMacSpoofCheck(o.Veth)
		if err == nil {
			err = host.DeleteLink(o.Veth)
		}
		set(o, err)
	}
	removeBandwidthIfbs(host, orphans)
	var storeErr error
	st, err := store.OpenWith(store.Dir(c.String("data-dir")), store.Options{NoCreate: true})
	if errors.Is(err, store.ErrNotFound) {
		return // nothing recorded, so no store orphans
	}
	if err != nil {
		storeErr = err
	} else {
		defer st.Close()
	}
	// The chained and meta roles' records before the endpoint records
	// their staleness may rest on.
	removeRecordOrphans(st, storeErr, orphans)
	for i := range orphans {
		o := &orphans[i]
		switch {
		case o.Kind != "reservation" && o.Kind != "endpoint":
			continue
		case storeErr != nil:
			set(o, storeErr)
		case o.Kind == "reservation":
			set(o, st.IPAM(o.Network, func(tx *store.IPAMTx) error {
				// Only if the address still has the owner gc decided on.
				if r, ok := tx.Get(o.Addr); ok && r.ContainerID == o.ContainerID && r.IfName == o.IfName {
					return tx.Release(o.Addr)
				}
				return nil
			}))
		default: // endpoint: anything its owner still holds goes with it
			err := st.IPAM(o.Network, func(tx *store.IPAMTx) error {
				_, err := ipam.Release(tx, o.ContainerID, o.IfName)
				return err
			})
			if err == nil {
				err = st.DeleteEndpoint(o.Network, o.ContainerID, o.IfName)
			}
			set(o, err)
		}
	}
}

func printOrphans(c *ucli.Context, orphans []orphan, dry bool) {
	w := c.App.Writer
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
		row(tw, o.Kind, o.subject(), done, o.Reason)
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
