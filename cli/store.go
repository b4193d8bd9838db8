package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/store"
)

func storeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "store",
		Usage: "check the node's store file, or rebuild it from the kernel",
		Subcommands: []*ucli.Command{
			{
				Name:  "check",
				Usage: "read the whole store: pages, records, IPAM indexes; exit 1 on any problem",
				UsageText: "cnibox store check [--data-dir DIR] [--json]\n\n" +
					"Reads every page and record of the store file and checks the IPAM indexes against the\n" +
					"reservations. Exit 0: sound. Exit 1: problems (listed), or the file cannot be read at all;\n" +
					"then `cnibox store rebuild` makes a new one.",
				Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
				Action: runStoreCheck,
			},
			{
				Name:  "rebuild",
				Usage: "make a new store from the veths, namespaces and libcni cache of the node; the old file is kept aside",
				UsageText: "cnibox store rebuild [--data-dir DIR] [--conf-dir DIR] [--cache-dir DIR] [--dry-run] [--json]\n\n" +
					"For a store that cannot be read (or whose check fails). It finds every host veth of cnibox's\n" +
					"bridge role (cbx*) and its peer in the pod namespaces that exist (/run/netns/*, /proc/*/ns/net),\n" +
					"names the attachment from libcni's cache (container ID, network, pod) or, failing that, from the\n" +
					"network config that uses the veth's bridge, and records the pod's addresses as reservations and\n" +
					"the attachment as an endpoint. Attachments of other main plugins that use host-local are\n" +
					"recovered from libcni's cache when their namespace still has the interface.\n" +
					"Not recovered: sticky addresses of pods that are not running, round-robin positions, and the\n" +
					"records of the meta roles, portmap and the overlay agent (the agent writes its own again).\n" +
					"A veth with no cache entry is recorded under the container ID rebuilt-<veth>: its address stays\n" +
					"reserved until the runtime's GC or `cnibox gc` drops it; DEL of the real container cannot.",
				Flags: []ucli.Flag{dataDirFlag, confDirFlag, cacheFlag, jsonFlag,
					&ucli.BoolFlag{Name: "dry-run", Usage: "show what would be recorded; change nothing"}},
				Action: runStoreRebuild,
			},
		},
	}
}

// checkOutput is `cnibox store check --json`.
type checkOutput struct {
	Path     string             `json:"path"`
	Readable bool               `json:"readable"`
	Error    string             `json:"error,omitempty"`
	Report   *store.CheckReport `json:"report,omitempty"`
}

func runStoreCheck(c *ucli.Context) error {
	st, dir, err := openStore(c)
	path := filepath.Join(dir, store.FileName)
	if errors.Is(err, store.ErrNotFound) {
		fmt.Fprintf(c.App.Writer, "%s: no store file (nothing was ever stored on this node): nothing to check\n", path)
		return nil
	}
	out := checkOutput{Path: path}
	if err == nil {
		var rep store.CheckReport
		rep, err = st.Check()
		st.Close()
		out.Report = &rep
	}
	if err != nil {
		out.Error = err.Error()
	} else {
		out.Readable = true
	}
	return show(c, out, printCheck, func(out checkOutput) bool { return !out.Readable || len(out.Report.Problems) > 0 })
}

func printCheck(w io.Writer, out checkOutput) error {
	if !out.Readable {
		fmt.Fprintf(w, "%s: cannot be read: %s\n", out.Path, out.Error)
		fmt.Fprintf(w, "recover: cnibox store rebuild --data-dir %s\n", filepath.Dir(out.Path))
		return nil
	}
	rep := out.Report
	schema := fmt.Sprint(rep.Schema)
	if rep.Schema == 0 {
		schema = "1 (not recorded: written before versions were)"
	}
	fmt.Fprintf(w, "%s: %d bytes, schema %s, last reclaim in boot %s\n", rep.Path, rep.Size, schema, orDash(rep.Boot))
	fmt.Fprintf(w, "endpoint records: %d\n", rep.Endpoints)
	for _, n := range rep.Networks {
		fmt.Fprintf(w, "network %s: %d reservations, %d sticky pods\n", n.Name, n.Reservations, n.Sticky)
	}
	var names []string
	for name := range rep.Buckets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "bucket %s: %d keys\n", name, rep.Buckets[name])
	}
	if len(rep.Problems) == 0 {
		fmt.Fprintln(w, "ok: no problems")
		return nil
	}
	fmt.Fprintf(w, "%d problems:\n", len(rep.Problems))
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "  "+p)
	}
	fmt.Fprintf(w, "recover: cnibox store rebuild --data-dir %s\n", filepath.Dir(rep.Path))
	return nil
}

// rebuildOutput is `cnibox store rebuild --json`.
type rebuildOutput struct {
	Path        string                `json:"path"`
	DryRun      bool                  `json:"dryRun"`
	Backup      string                `json:"backup,omitempty"`
	Attachments []nodestate.Recovered `json:"attachments"`
	Warnings    []string              `json:"warnings,omitempty"`
}

func runStoreRebuild(c *ucli.Context) error {
	dir := store.Dir(c.String("data-dir"))
	out := rebuildOutput{Path: filepath.Join(dir, store.FileName), DryRun: c.Bool("dry-run"), Attachments: []nodestate.Recovered{}}
	found, warnings, err := nodestate.Discover(c.String("conf-dir"), c.String("cache-dir"))
	if err != nil {
		return err
	}
	out.Attachments, out.Warnings = found, warnings
	if !out.DryRun {
		out.Backup, err = store.Rebuild(dir, store.Options{}, func(st *store.Store) error {
			return nodestate.Record(st, found, c.String("conf-dir"), c.App.ErrWriter)
		})
		if err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, out)
	}
	w := newTable(c.App.Writer)
	row(w, "NETWORK", "CONTAINER", "IFNAME", "POD", "IPS", "HOST VETH", "NETNS", "FROM")
	for _, a := range out.Attachments {
		row(w, a.Network, short(a.ContainerID), a.IfName, orDash(a.Pod), joinStrings(a.IPs), orDash(a.HostVeth), a.Netns, a.Source)
	}
	w.Flush()
	for _, warn := range out.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "warning:", warn)
	}
	switch {
	case out.DryRun:
		fmt.Fprintf(c.App.Writer, "dry run: %d attachments would be recorded in %s\n", len(out.Attachments), out.Path)
	case out.Backup != "":
		fmt.Fprintf(c.App.Writer, "rebuilt %s with %d attachments; the old file is kept as %s\n", out.Path, len(out.Attachments), out.Backup)
	default:
		fmt.Fprintf(c.App.Writer, "created %s with %d attachments\n", out.Path, len(out.Attachments))
	}
	return nil
}
