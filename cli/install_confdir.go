package cli

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/nodestate"
)

// confDirAhead returns the config files of confDir whose names sort before
// name (what containerd and CRI-O read first: the dir's first file in name
// order is the default network), name itself left out.
func confDirAhead(confDir, name string) ([]string, error) {
	files, err := libcni.ConfFiles(confDir, nodestate.ConfExtensions)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if b := filepath.Base(f); b < name {
			out = append(out, b)
		}
	}
	sort.Strings(out)
	return out, nil
}

// checkConfDirOrder refuses to install the conflist as name into confDir
// when another config file there sorts before it: the node would go on
// using that one, the install would change nothing a pod sees. --force
// installs anyway, with a warning.
func checkConfDirOrder(c *ucli.Context, confDir, name string) error {
	ahead, err := confDirAhead(confDir, name)
	if err != nil {
		return fmt.Errorf("install: read the conf dir %s: %w", confDir, err)
	}
	if len(ahead) == 0 {
		return nil
	}
	first := ahead[0]
	what := first
	if l, err := nodestate.LoadConfFile(filepath.Join(confDir, first)); err == nil {
		what = fmt.Sprintf("%s (network %q)", first, l.Name)
	}
	others := ""
	if len(ahead) > 1 {
		others = fmt.Sprintf(" (and %s)", strings.Join(ahead[1:], ", "))
	}
	why := fmt.Sprintf("%s in %s%s sorts before %s: containerd and CRI-O take the conf dir's first file as the default network, so the node keeps using it and never this conflist", what, confDir, others, name)
	fix := fmt.Sprintf("give the conflist a name that sorts before %s (--conf-name %s), remove %s from %s, or install anyway with --force", first, lowerName(first, name), first, confDir)
	if c.Bool("force") {
		fmt.Fprintf(c.App.ErrWriter, "cnibox: warning: %s (installed anyway: --force); fix: %s\n", why, fix)
		return nil
	}
	return &exitError{code: 1, msg: fmt.Sprintf("install: conflist not installed, nothing written: %s; fix: %s", why, fix)}
}

// lowerName is a conflist name that sorts before first: name with "00-"
// in front of its own number, or NAME when that does not sort first.
func lowerName(first, name string) string {
	base := strings.TrimLeft(name, "0123456789-_")
	if base == "" || base == ".conflist" {
		base = "cnibox.conflist"
	}
	if "00-"+base < first {
		return "00-" + base
	}
	return "NAME"
}
