package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles"
	ucli "github.com/urfave/cli/v2"
)

// TestHelpExamples: every command a person runs has an example in its
// --help text (habits_test.go checks that the help ends with it).
func TestHelpExamples(t *testing.T) {
	app := newApp(Options{Version: "test", Registry: roles.Registry()})
	var walk func(path string, cmds []*ucli.Command)
	walk = func(path string, cmds []*ucli.Command) {
		for _, c := range cmds {
			p := path + " " + c.Name
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			if c.Name == "help" {
				continue
			}
			if !strings.Contains(c.UsageText+c.Description+c.CustomHelpTemplate, "Example") {
				t.Errorf("%s --help has no example", p)
			}
		}
	}
	walk("cnibox", app.Commands)
}

// TestCompletion: the scripts name the program and ask it for the words
// (test/e2e checks the answers of the built binary).
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		var out bytes.Buffer
		app := newApp(Options{Registry: roles.Registry()})
		app.Writer = &out
		if err := app.Run([]string{"cnibox", "completion", shell}); err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		if !strings.Contains(out.String(), "--generate-bash-completion") || !strings.Contains(out.String(), "cnibox") {
			t.Errorf("completion %s script:\n%s", shell, out.String())
		}
	}
	app := newApp(Options{Registry: roles.Registry()})
	if err := app.Run([]string{"cnibox", "completion", "fish"}); err == nil {
		t.Error("completion fish: no error")
	}
}
