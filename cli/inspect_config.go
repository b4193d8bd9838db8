package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

func (o Options) runInspectConfig(c *ucli.Context) error {
	if _, err := binDirs(c); err != nil {
		return err
	}
	rep := inspectConfig(c.Context, c.String("conf-dir"), c.String("bin-dir"))
	o.checkActive(&rep)
	return show(c, rep, printConfigReport, func(rep configReport) bool { return !rep.Valid })
}

// checkActive runs cnibox check over the active file; an error it finds
// makes the config invalid (the runtime's ADD would fail on it).
func (o Options) checkActive(rep *configReport) {
	if rep.Active == nil || o.Registry == nil {
		return
	}
	ck := checker{reg: o.Registry, binDirs: filepath.SplitList(rep.BinDir)}
	cf := ck.file(rep.Active.File)
	rep.Check = &cf
	for _, f := range cf.Findings {
		if f.Severity == sevError {
			rep.Valid = false
		}
	}
}

// checkCounts are the errors and warnings of a checked file.
func checkCounts(f *checkedFile) (errs, warns int) {
	if f == nil {
		return 0, 0
	}
	for _, x := range f.Findings {
		if x.Severity == sevError {
			errs++
		} else {
			warns++
		}
	}
	return errs, warns
}

func printConfigReport(w io.Writer, rep configReport) error {
	tw := newTable(w)
	row(tw, "config dir", rep.ConfDir)
	row(tw, "bin dir", rep.BinDir)
	if a := rep.Active; a != nil {
		row(tw, "active", fmt.Sprintf("%s (network %q, cniVersion %s)", a.File, a.Network, a.CNIVersion))
	} else {
		row(tw, "active", "NONE")
	}
	row(tw, "why", rep.Reason)
	tw.Flush()
	section(w, rep.Files, []string{"FILE", "NETWORK", "VERSION", "PLUGINS", "STATUS"}, func(f confFile) []string {
		status := "not the default"
		switch {
		case f.Error != "":
			status = "BROKEN: " + f.Error
		case rep.Active != nil && f.File == rep.Active.File:
			status = "active"
		}
		return []string{f.File, orDash(f.Network), orDash(f.CNIVersion), orDash(strings.Join(f.Plugins, ",")), status}
	})
	section(w, rep.Plugins, []string{"PLUGIN", "KIND", "PATH", "VERSIONS", "STATUS"}, func(p pluginCheck) []string {
		path := p.Path
		if p.Target != "" {
			path += " -> " + p.Target
		}
		status := "ok"
		if p.Error != "" {
			status = "FAIL: " + p.Error
		}
		return []string{p.Type, p.Kind, orDash(path), orDash(strings.Join(p.Versions, ",")), status}
	})
	fmt.Fprintln(w)
	errs, warns := checkCounts(rep.Check)
	if rep.Check != nil && len(rep.Check.Findings) > 0 {
		fmt.Fprintf(w, "cnibox check %s:\n", rep.Check.File)
		printFindings(w, rep.Check.Findings)
		fmt.Fprintln(w)
	}
	switch {
	case rep.Valid:
		caps := "none"
		if len(rep.Capabilities) > 0 {
			caps = strings.Join(rep.Capabilities, ", ")
		}
		checked := ""
		switch {
		case rep.Check != nil && warns > 0:
			checked = fmt.Sprintf("; cnibox check: %d warning(s) above (fields no plugin reads)", warns)
		case rep.Check != nil:
			checked = "; cnibox check: clean"
		}
		fmt.Fprintf(w, "valid: every plugin found and speaks the network's cniVersion (libcni ValidateNetworkList)%s; capabilities: %s\n", checked, caps)
	case errs > 0:
		fmt.Fprintf(w, "INVALID: cnibox check found %d error(s) above: a pod's ADD would fail on them\n", errs)
	case rep.Error != "":
		fmt.Fprintf(w, "INVALID: %s\n", rep.Error)
	default:
		fmt.Fprintln(w, "INVALID: see the plugins above")
	}
	return nil
}
