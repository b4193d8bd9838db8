package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// Where `cnibox check` runs: on a node (root, the bin dir there) it holds the
// configs to the bin dirs and, with --node, to the node's interfaces; off a
// node (a laptop, CI) the roles of this binary count as present, as they
// will be once it is installed.

// nodeHere returns why this is not a node ("" when it is one): not root
// (euid), or none of the bin dirs exists.
func nodeHere(dirs []string, euid int) string {
	if euid != 0 {
		return "not root"
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return ""
		}
	}
	return "no bin dir " + strings.Join(dirs, ":")
}

// checkPlace sets where check runs from --node (default: nodeHere) and,
// on a node, opens the node's namespace for the roles' interfaces; close
// closes it.
func (ck *checker) checkPlace(c *ucli.Context) (close func(), err error) {
	ck.offNode = nodeHere(ck.binDirs, os.Geteuid())
	if c.IsSet("node") {
		ck.offNode = ""
		if !c.Bool("node") {
			ck.offNode = "--node=false"
		}
	}
	if ck.offNode != "" {
		return func() {}, nil
	}
	h, err := netops.Open("")
	if err != nil {
		return nil, fmt.Errorf("check --node: open the node's network namespace: %w", err)
	}
	ck.host, ck.env = h, &nodeEnv{root: "/"}
	return func() { h.Close() }, nil
}

// binary reports a plugin type that is in none of the bin dirs (for a role
// of cnibox the fix is install; off a node or while installing a role counts
// as present), and a plugin that is not cnibox's that does not speak the
// list's cniVersion (speaks).
func (ck checker) binary(typ, field, cniVersion string) []checkFinding {
	if typ == "" {
		return []checkFinding{{Severity: sevError, Path: field, Message: "no plugin type", Fix: "set \"type\" to a plugin (cnibox roles lists cnibox's)"}}
	}
	_, ours := ck.reg.Lookup(typ)
	if _, err := invoke.FindInPath(typ, ck.binDirs); err == nil {
		if ours {
			return nil
		}
		return ck.speaks(typ, field, cniVersion)
	}
	if ours {
		if ck.installing || ck.offNode != "" {
			return nil
		}
		return []checkFinding{{Severity: sevError, Path: field, Value: typ,
			Message: fmt.Sprintf("%q is a cnibox role but not in the bin dirs %s: the runtime cannot run it", typ, strings.Join(ck.binDirs, ":")),
			Fix:     "cnibox install --dir " + ck.binDirs[0]}}
	}
	f := checkFinding{Severity: sevError, Path: field, Value: typ,
		Message: fmt.Sprintf("%q is no plugin of cnibox and not in the bin dirs %s", typ, strings.Join(ck.binDirs, ":")),
		Fix:     "install the plugin there, or name one of cnibox's (cnibox roles)"}
	if near := nearest(typ, ck.reg.Names()); near != "" {
		f.Message = fmt.Sprintf("%q is no plugin of cnibox and not in the bin dirs %s: did you mean %q?", typ, strings.Join(ck.binDirs, ":"), near)
		f.Fix = fmt.Sprintf("\"%s\": %q", strings.TrimPrefix(field, "ipam."), near)
	}
	return []checkFinding{f}
}

// nodeFindings are what the node lacks that the ADD of role, with config
// obj, needs there: the interfaces its NodeLinks name (a macvlan's master,
// a host-device's device), then envFindings. Nothing when the node is not
// looked at.
func (ck checker) nodeFindings(obj map[string]any, role *cniplug.Role) []checkFinding {
	if ck.host == nil || role.Known == nil {
		return ck.envFindings(obj, role, "")
	}
	out := ck.envFindings(obj, role, "")
	for _, nl := range role.Known.NodeLinks {
		name, _ := obj[nl.Field].(string)
		if in, _ := obj[nl.Unless].(bool); name == "" || (nl.Unless != "" && in) {
			continue
		}
		l, err := ck.host.LinkByName(name)
		switch {
		case errors.Is(err, netops.ErrNotFound) && nl.Moved:
			out = append(out, checkFinding{Severity: sevWarning, Path: nl.Field, Value: name,
				Message: fmt.Sprintf("the node has no interface %q: ADD fails unless it comes back (a pod that holds it now gives it back at its DEL)", name),
				Fix:     "check the name (ip link), or which pod holds it (cnibox inspect endpoints --detail)"})
		case errors.Is(err, netops.ErrNotFound):
			out = append(out, checkFinding{Severity: sevError, Path: nl.Field, Value: name,
				Message: fmt.Sprintf("the node has no interface %q: every ADD fails (CNI error 7)", name),
				Fix:     fmt.Sprintf("name an interface of the node in %q (ip link lists them)", nl.Field)})
		case err != nil:
			out = append(out, checkFinding{Severity: sevWarning, Path: nl.Field, Value: name,
				Message: fmt.Sprintf("cannot look for interface %q on the node: %v", name, err)})
		case !l.Up && !nl.Moved:
			out = append(out, checkFinding{Severity: sevWarning, Path: nl.Field, Value: name,
				Message: fmt.Sprintf("the node's interface %q is down: pods get their interfaces, but no traffic flows", name),
				Fix:     fmt.Sprintf("ip link set %s up", name)})
		}
	}
	return out
}

// envFindings are the files, sockets and kernel features that the ADD of
// role (a main role, or the IPAM role of obj, the ipam section, at prefix
// "ipam.") needs and the node lacks (check_env.go). Nothing when the node
// is not looked at.
func (ck checker) envFindings(obj map[string]any, role *cniplug.Role, prefix string) []checkFinding {
	if ck.env == nil || role.Known == nil {
		return nil
	}
	out := ck.env.fileFindings(obj, role, prefix)
	for _, f := range ck.env.kernelFindings(role, role.Name) {
		f.Path = prefix + f.Path
		out = append(out, f)
	}
	return out
}
