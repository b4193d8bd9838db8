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

func (o Options) runStoreRebuild(c *ucli.Context) error {
	dir := store.Dir(c.String("data-dir"))
	out := rebuildOutput{Path: filepath.Join(dir, store.FileName), DryRun: c.Bool("dry-run"), Attachments: []nodestate.Recovered{}}
	found, warnings, err := nodestate.Discover(o.Registry, c.String("conf-dir"), c.String("cache-dir"))
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
	row(w, "NETWORK", "CONTAINER", "IFNAME", "POD", "PLUGIN", "IPS", "HOST VETH", "NETNS", "FROM")
	for _, a := range out.Attachments {
		row(w, a.Network, short(a.ContainerID), a.IfName, orDash(a.Pod), orDash(a.Plugin), joinStrings(a.IPs), orDash(a.HostVeth), a.Netns, a.Source)
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
