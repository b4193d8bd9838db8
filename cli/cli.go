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
	app := newApp(o)
	if err := app.Run(argv); err != nil {
		if err.Error() != "" { // an empty message: the command already said why
			fmt.Fprintln(os.Stderr, "cnibox:", err)
		}
		var ec ucli.ExitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

// newApp builds the application around the command tree (commands.go).
func newApp(o Options) *ucli.App {
	return &ucli.App{
		Name:  "cnibox",
		Usage: "every CNI plugin a node needs, in one binary",
		UsageText: "cnibox command [options]\n\n" +
			"Debugging a node:\n" +
			"  cnibox doctor                      every check, pass/fail with the fix\n" +
			"  cnibox inspect config|endpoints|ipam|topology\n" +
			"  cnibox logs --errors --since 1h    what the CNI calls said\n" +
			"  cnibox gc --dry-run                what pods that are gone left behind\n" +
			"Shell completion: source <(cnibox completion bash)",
		Version: o.Version,
		Description: "Installed as symlinks in /opt/cni/bin (cnibox install), the binary answers as each CNI plugin type.\n" +
			"Run as cnibox, it inspects and manages the node's CNI state.",
		HideVersion:          true,
		EnableBashCompletion: true,
		Commands:             commands(o),
		ExitErrHandler:       func(*ucli.Context, error) {},
	}
}

// printVersion is `cnibox version`.
func (o Options) printVersion(c *ucli.Context) error {
	fmt.Fprintf(c.App.Writer, "cnibox %s\nCNI spec versions: %v\n", o.Version, cniplug.SupportedVersions)
	return nil
}

// printRoles is `cnibox roles`.
func (o Options) printRoles(c *ucli.Context) error {
	for _, name := range o.Registry.Names() {
		fmt.Fprintln(c.App.Writer, name)
	}
	return nil
}
