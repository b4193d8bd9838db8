package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	ucli "github.com/urfave/cli/v2"
)

func installCommand(o Options) *ucli.Command {
	return &ucli.Command{
		Name:  "install",
		Usage: "create or refresh a symlink to this binary for every role in a CNI bin dir",
		UsageText: "cnibox install [--dir DIR] [--target BIN] [--force]\n\n" +
			"Example: cnibox install --dir /opt/cni/bin",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "dir", Value: "/opt/cni/bin", Usage: "the CNI plugin directory"},
			&ucli.StringFlag{Name: "target", Usage: "the binary the links point to (default: this executable)"},
			&ucli.BoolFlag{Name: "force", Usage: "replace files and links that are not cnibox's"},
		},
		Action: func(c *ucli.Context) error {
			target := c.String("target")
			if target == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find this executable: %w", err)
				}
				target = exe
			}
			target, err := filepath.Abs(target)
			if err != nil {
				return err
			}
			if resolved, err := filepath.EvalSymlinks(target); err == nil {
				target = resolved
			}
			res, err := Install(c.String("dir"), target, o.Registry.Names(), c.Bool("force"))
			for _, line := range res {
				fmt.Fprintln(c.App.Writer, line)
			}
			return err
		},
	}
}

// Install makes dir/<name> a symlink to target for each name. A link that
// already points at target is left alone; a file or link that is not ours is
// replaced only with force. It returns one line per name saying what it did.
func Install(dir, target string, names []string, force bool) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	self, err := os.Stat(target)
	if err != nil {
		return nil, fmt.Errorf("install target %s: %w", target, err)
	}
	var out []string
	var errs []error
	for _, name := range names {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, err)
			continue
		default:
			cur, statErr := os.Stat(p)
			ours := statErr == nil && os.SameFile(cur, self)
			if link, err := os.Readlink(p); err == nil && filepath.Base(link) == "cnibox" {
				ours = true // a link left by an earlier install of cnibox
			}
			if ours && fi.Mode()&fs.ModeSymlink != 0 {
				if link, _ := os.Readlink(p); link == target {
					out = append(out, fmt.Sprintf("ok        %s -> %s", p, target))
					continue
				}
			}
			if !ours && !force {
				errs = append(errs, fmt.Errorf("%s exists and is not cnibox's: remove it or rerun with --force", p))
				out = append(out, fmt.Sprintf("skipped   %s (not ours; --force replaces it)", p))
				continue
			}
		}
		// Create under a temporary name and rename over the old entry, so a
		// runtime never sees the plugin missing.
		tmp := p + ".cnibox-new"
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(tmp, p); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, fmt.Sprintf("linked    %s -> %s", p, target))
	}
	return out, errors.Join(errs...)
}
