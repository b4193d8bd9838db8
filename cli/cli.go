// Package cli is the operator's command line: `cnibox <command>`. It is what
// runs when the binary is not invoked under a role's name.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/buildinfo"
)

// Options carries what the CLI needs from main.
type Options struct {
	// Version is the build's (git describe's, from the Makefile); Release,
	// when set, stands for internal/buildinfo's (tests).
	Version, Release string
	Registry         *cniplug.Registry
}

// Exit codes of every command (docs/cli.md): 0 done, or nothing wrong found;
// 1 a problem found or the command failed (a view of cnibox-agent's when the
// agent or that feature is absent on this node included); 64 (sysexits'
// EX_USAGE) a wrong command line: an unknown flag or command, a flag value
// that does not parse. (2 is cnibox check --strict's "warnings only".)
const (
	exitFailed = 1
	exitUsage  = 64
)

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
		return exitFailed
	}
	return 0
}

// newApp builds the application around the command tree (commands.go).
func newApp(o Options) *ucli.App {
	app := &ucli.App{
		Name:  "cnibox",
		Usage: "every CNI plugin a node needs, in one binary",
		UsageText: "cnibox command [options]\n\n" +
			"Debugging a node:\n" +
			"  cnibox doctor                      every check, pass/fail with the fix\n" +
			"  cnibox inspect config|endpoints|ipam|topology\n" +
			"  cnibox logs --errors --since 1h    what the CNI calls said\n" +
			"  cnibox gc --dry-run                what pods that are gone left behind\n" +
			"Shell completion: source <(cnibox completion bash)\n" +
			"Example: cnibox doctor --pod default/web-0",
		Version: o.Version,
		Description: "Installed as symlinks in /opt/cni/bin (cnibox install), the binary answers as each CNI plugin type.\n" +
			"Run as cnibox, it inspects and manages the node's CNI state.",
		// urfave's own --version is hidden: ours is a plain flag of the
		// app, answered by its Action like `cnibox version`.
		HideVersion:          true,
		Flags:                []ucli.Flag{&ucli.BoolFlag{Name: "version", Usage: "print the version (as cnibox version)"}},
		EnableBashCompletion: true,
		Commands:             commands(o),
		ExitErrHandler:       func(*ucli.Context, error) {},
		OnUsageError:         usageError,
		Action: func(c *ucli.Context) error {
			if c.Bool("version") {
				return o.printVersion(c)
			}
			if c.Args().Present() {
				return usageError(c, fmt.Errorf("no command %q", c.Args().First()), false)
			}
			return ucli.ShowAppHelp(c)
		},
	}
	var each func([]*ucli.Command)
	each = func(cmds []*ucli.Command) {
		for _, cmd := range cmds {
			cmd.OnUsageError = usageError
			examplesLast(cmd)
			if len(cmd.Subcommands) > 0 && cmd.Action == nil {
				cmd.Action = groupAction
			}
			each(cmd.Subcommands)
		}
	}
	each(app.Commands)
	if ex := cutExamples(&app.UsageText); ex != "" {
		app.CustomAppHelpTemplate = ucli.AppHelpTemplate + ex
	}
	return app
}

// examplesLast moves cmd's examples (the text from "Example" on, in its
// usage text or description) to the end of its --help, after the options.
func examplesLast(cmd *ucli.Command) {
	ex := cutExamples(&cmd.UsageText)
	if ex == "" {
		ex = cutExamples(&cmd.Description)
	}
	if ex == "" {
		return
	}
	tmpl := ucli.CommandHelpTemplate
	if len(cmd.Subcommands) > 0 {
		tmpl = ucli.SubcommandHelpTemplate
	}
	cmd.CustomHelpTemplate = tmpl + ex
}

// cutExamples removes the text from the first "Example" of *text on and
// returns it as the help's last section. (No template actions in it: an
// example holds no "{{".)
func cutExamples(text *string) string {
	i := strings.Index(*text, "Example")
	if i < 0 || strings.Contains((*text)[i:], "{{") {
		return ""
	}
	ex := strings.TrimRight((*text)[i:], "\n")
	*text = strings.TrimRight((*text)[:i], " \n")
	return "\n" + ex + "\n"
}

// groupAction runs a command that only groups others (exec, inspect,
// overlay, store) when no subcommand is named: its help, or for a word that
// names none, a usage error (urfave's default is "No help topic", exit 3).
func groupAction(c *ucli.Context) error {
	if c.Args().Present() {
		return usageError(c, fmt.Errorf("no command %q", c.Args().First()), true)
	}
	return ucli.ShowSubcommandHelp(c)
}

// usageError is every command's answer to a command line it cannot parse:
// one line on stderr saying what is wrong and one pointing at --help (not
// the whole help), exit code exitUsage.
func usageError(c *ucli.Context, err error, _ bool) error {
	name := "cnibox"
	if c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	fmt.Fprintf(c.App.ErrWriter, "%s: %v%s\nRun '%s --help' for usage.\n", name, err, flagForm(c, err), name)
	return &exitError{code: exitUsage}
}

// flagForm is what a flag whose value did not parse takes, for urfave's
// bare "parse error" ("invalid value "foo" for flag -since: parse error"):
// "" for any other error.
func flagForm(c *ucli.Context, err error) string {
	m := regexp.MustCompile(`for flag -+([\w-]+): parse error`).FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	var flags []ucli.Flag
	if c.Command != nil {
		flags = c.Command.Flags
	}
	for _, f := range append(flags, c.App.Flags...) {
		if !slices.Contains(f.Names(), m[1]) {
			continue
		}
		switch f.(type) {
		case *ucli.DurationFlag:
			return " (want a duration: a number and a unit, e.g. 90s, 30m, 2h)"
		case *ucli.IntFlag, *ucli.Int64Flag, *ucli.UintFlag, *ucli.Uint64Flag:
			return " (want a whole number)"
		}
	}
	return ""
}

// versionInfo is what `cnibox version` prints: the release and the commit
// (internal/buildinfo, the same for cnibox-agent and cnibox-dhcp), as
// kubectl prints a release and a commit, and the build (git describe's).
type versionInfo struct {
	buildinfo.Info
	Build        string   `json:"build,omitempty"`
	SpecVersions []string `json:"cniVersions"`
}

// printVersion is `cnibox version` and `cnibox --version`.
func (o Options) printVersion(c *ucli.Context) error {
	v := versionInfo{Info: buildinfo.Get(), Build: o.Version, SpecVersions: cniplug.SupportedVersions}
	if o.Release != "" {
		v.Release = o.Release
	}
	return show(c, v, func(w io.Writer, v versionInfo) error {
		if err := v.Info.Write(w, "cnibox", v.Build); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "CNI spec versions: %v\n", v.SpecVersions)
		return err
	}, nil)
}

// printRoles is `cnibox roles`.
func (o Options) printRoles(c *ucli.Context) error {
	return show(c, o.Registry.Names(), func(w io.Writer, names []string) error {
		for _, name := range names {
			fmt.Fprintln(w, name)
		}
		return nil
	}, nil)
}
