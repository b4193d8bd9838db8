package cli

import (
	"fmt"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// argsWithLateFlags returns c's arguments, the command's own flags among
// them (after a file, as in `cnibox check DIR --json`) set on c and taken
// out: urfave/cli stops reading flags at the first argument, and a person
// types them where they come to mind. "--" ends the flags: what follows
// is an argument however it looks.
func argsWithLateFlags(c *ucli.Context) ([]string, error) {
	var out []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i+1:]...), nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		i0 := slices.IndexFunc(c.Command.Flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), name) })
		if i0 < 0 {
			return nil, usageError(c, fmt.Errorf("flag provided but not defined: %s (an argument that starts with '-': put it after --)", a), false)
		}
		if _, isBool := c.Command.Flags[i0].(*ucli.BoolFlag); isBool {
			if !hasVal {
				val = "true"
			}
		} else if !hasVal {
			if i+1 >= len(args) {
				return nil, usageError(c, fmt.Errorf("flag needs an argument: %s", a), false)
			}
			i++
			val = args[i]
		}
		if err := c.Set(name, val); err != nil {
			return nil, usageError(c, fmt.Errorf("invalid value %q for flag %s: %w", val, a, err), false)
		}
	}
	return out, nil
}
