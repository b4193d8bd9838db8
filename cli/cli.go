// Package cli is the operator's command line: `cnibox <command>`. It is what
// runs when the binary is not invoked under a role's name.
package cli

import (
	"errors"
	"fmt"
	"os"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
)

// Options carries what the CLI needs from main.
type Options struct {
	Version  string
	Registry *cniplug.Registry
}

// Run runs the CLI with argv and returns the exit code.
func Run(argv []string, o Options) int {
	app := &ucli.App{
		Name:    "cnibox",
		Usage:   "every CNI plugin a node needs, in one binary",
		Version: o.Version,
		Description: "Installed as symlinks in /opt/cni/bin (cnibox install), the binary answers as each CNI plugin type.\n" +
			"Run as cnibox, it inspects and manages the node's CNI state.",
		HideVersion: true,
		Commands: []*ucli.Command{
			versionCommand(o),
			rolesCommand(o),
			installCommand(o),
			execCommand(),
			inspectCommand(),
			logsCommand(),
		},
		ExitErrHandler: func(*ucli.Context, error) {},
	}
	if err := app.Run(argv); err != nil {
		fmt.Fprintln(os.Stderr, "cnibox:", err)
		var ec ucli.ExitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

func versionCommand(o Options) *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the cnibox version and the CNI spec versions it speaks",
		Action: func(c *ucli.Context) error {
			fmt.Fprintf(c.App.Writer, "cnibox %s\nCNI spec versions: %v\n", o.Version, cniplug.SupportedVersions)
			return nil
		},
	}
}

func rolesCommand(o Options) *ucli.Command {
	return &ucli.Command{
		Name:  "roles",
		Usage: "list the CNI plugin types this binary answers as",
		Action: func(c *ucli.Context) error {
			for _, name := range o.Registry.Names() {
				fmt.Fprintln(c.App.Writer, name)
			}
			return nil
		},
	}
}
