package cli

import (
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

func runInspectConfig(c *ucli.Context) error {
	rep := inspectConfig(c.Context, c.String("conf-dir"), c.String("bin-dir"))
	return show(c, rep, printConfigReport, func(rep configReport) bool { return !rep.Valid })
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
	switch {
	case rep.Valid:
		caps := "none"
		if len(rep.Capabilities) > 0 {
			caps = strings.Join(rep.Capabilities, ", ")
		}
		fmt.Fprintf(w, "valid: every plugin found and speaks the network's cniVersion (libcni ValidateNetworkList); capabilities: %s\n", caps)
	case rep.Error != "":
		fmt.Fprintf(w, "INVALID: %s\n", rep.Error)
	default:
		fmt.Fprintln(w, "INVALID: see the plugins above")
	}
	return nil
}
