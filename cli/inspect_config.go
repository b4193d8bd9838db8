package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

func inspectConfigCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "config",
		Usage: "the network config a runtime would pick, why, and whether its plugins are there",
		UsageText: "cnibox inspect config [--conf-dir DIR] [--bin-dir DIR] [--json]\n\n" +
			"Exits 1 when there is no usable config or it does not validate.\n" +
			"Example: cnibox inspect config --conf-dir /etc/cni/net.d --bin-dir /opt/cni/bin",
		Flags:  []ucli.Flag{confDirFlag, binDirFlag, jsonFlag},
		Action: runInspectConfig,
	}
}

func runInspectConfig(c *ucli.Context) error {
	rep := inspectConfig(c.Context, c.String("conf-dir"), c.String("bin-dir"))
	w := c.App.Writer
	if c.Bool("json") {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else {
		printConfigReport(c, rep)
	}
	if !rep.Valid {
		return &exitError{code: 1}
	}
	return nil
}

func printConfigReport(c *ucli.Context, rep configReport) {
	w := c.App.Writer
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
	if len(rep.Files) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		row(tw, "FILE", "NETWORK", "VERSION", "PLUGINS", "STATUS")
		for _, f := range rep.Files {
			status := "not the default"
			switch {
			case f.Error != "":
				status = "BROKEN: " + f.Error
			case rep.Active != nil && f.File == rep.Active.File:
				status = "active"
			}
			row(tw, f.File, orDash(f.Network), orDash(f.CNIVersion), orDash(strings.Join(f.Plugins, ",")), status)
		}
		tw.Flush()
	}
	if len(rep.Plugins) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		row(tw, "PLUGIN", "KIND", "PATH", "VERSIONS", "STATUS")
		for _, p := range rep.Plugins {
			path := p.Path
			if p.Target != "" {
				path += " -> " + p.Target
			}
			status := "ok"
			if p.Error != "" {
				status = "FAIL: " + p.Error
			}
			row(tw, p.Type, p.Kind, orDash(path), orDash(strings.Join(p.Versions, ",")), status)
		}
		tw.Flush()
	}
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
}
