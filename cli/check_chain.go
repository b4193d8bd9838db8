package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
)

// What `cnibox check` finds in a list beyond each plugin's own fields: what
// the roles declare of their place in a chain (a chained plugin needs a main
// plugin before it, reads no "ipam" and the capabilities its Known names),
// and whether a plugin that is not cnibox's speaks the list's cniVersion.

// versionTimeout bounds a foreign plugin's answer to VERSION.
const versionTimeout = 5 * time.Second

// chainFindings are the findings of the i-th plugin of list, of role role,
// as written (obj), about its place in the chain.
func (ck checker) chainFindings(list *libcni.NetworkConfigList, i int, obj map[string]any, role *cniplug.Role) []checkFinding {
	var out []checkFinding
	if role.Chained() {
		out = append(out, ck.order(list, i, role.Name)...)
		if _, ok := obj["ipam"]; ok {
			out = append(out, checkFinding{Severity: sevWarning, Path: "ipam",
				Message: fmt.Sprintf("%s is a chained plugin and reads no \"ipam\" section: it is ignored (the pod's addresses come from the main plugin's result)", role.Name),
				Fix:     "move the ipam section into the main plugin, or remove it"})
		}
	}
	if role.Known == nil {
		return out
	}
	caps, _ := obj["capabilities"].(map[string]any)
	for _, c := range role.Known.Capabilities {
		if on, _ := caps[c.Name].(bool); on {
			continue
		}
		if slices.ContainsFunc(c.Unless, func(f string) bool { _, set := obj[f]; return set }) {
			continue
		}
		out = append(out, checkFinding{Severity: sevWarning, Path: "capabilities",
			Message: fmt.Sprintf("%s reads the %q capability, which this plugin's \"capabilities\" does not ask for: %s", role.Name, c.Name, c.Lost),
			Fix:     fmt.Sprintf("add \"capabilities\": {%q: true} to the plugin", c.Name)})
	}
	return out
}

// order is the error of a chained plugin that is the i-th of list, when it
// is the first: no main plugin before it gives it a result (the chained
// plugins after it never run).
func (ck checker) order(list *libcni.NetworkConfigList, i int, typ string) []checkFinding {
	if i > 0 {
		return nil
	}
	main := ""
	for j := 1; j < len(list.Plugins) && main == ""; j++ {
		t := list.Plugins[j].Network.Type
		if r, ours := ck.reg.Lookup(t); t != "" && (!ours || (!r.Chained() && !r.IPAM)) {
			main = fmt.Sprintf("%s (plugins[%d])", t, j)
		}
	}
	f := checkFinding{Severity: sevError, Path: "type", Value: typ,
		Message: fmt.Sprintf("%s is a chained plugin: its ADD needs the result of a main plugin before it (prevResult), and it comes first: every ADD fails (CNI error 7, \"got no prevResult\")", typ),
		Fix:     "put the main plugin (bridge, ptp, macvlan, ...) first in \"plugins\", then the chained ones"}
	if main != "" {
		f.Fix = "move it after the main plugin " + main
	}
	return []checkFinding{f}
}

// speaks is the error of a plugin that is not cnibox's, found in the bin
// dirs, which does not speak cniVersion: it asks the plugin (VERSION) as
// `inspect config` and `doctor` do (checkPlugin), once per plugin and
// version of a run.
func (ck checker) speaks(typ, field, cniVersion string) []checkFinding {
	key := typ + "\x00" + cniVersion
	pc, done := ck.versions[key]
	if !done {
		ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
		pc = checkPlugin(ctx, typ, "plugin", ck.binDirs, cniVersion)
		cancel()
		if ck.versions != nil {
			ck.versions[key] = pc
		}
	}
	if pc.Error == "" {
		return nil
	}
	const leak = "every ADD fails, and the runtime's DEL after it stops at this plugin, so the plugins before it keep the addresses and records they made (cnibox gc reclaims them)"
	v := cniVersionOrDefault(cniVersion)
	f := checkFinding{Severity: sevError, Path: field, Value: typ,
		Message: fmt.Sprintf("plugin %q (%s) speaks cniVersion %s, not the list's %q (its VERSION answer): %s", typ, pc.Path, strings.Join(pc.Versions, ", "), v, leak),
		Fix:     fmt.Sprintf("set the list's \"cniVersion\" to one %s speaks (%s), or install a %s that speaks %q", typ, strings.Join(pc.Versions, ", "), typ, v)}
	if len(pc.Versions) == 0 && pc.Path != "" && strings.HasPrefix(pc.Error, "VERSION failed") {
		// No answer: a plugin that is no skel plugin may still take ADD.
		f.Severity = sevWarning
		f.Message = fmt.Sprintf("plugin %q (%s) does not answer VERSION (%s): whether it speaks cniVersion %q is unknown; if it does not, %s", typ, pc.Path, strings.TrimPrefix(pc.Error, "VERSION failed: "), v, leak)
		f.Fix = fmt.Sprintf("make it answer VERSION (try: CNI_COMMAND=VERSION %s </dev/null)", pc.Path)
	} else if len(pc.Versions) == 0 {
		f.Message, f.Fix = fmt.Sprintf("plugin %q: %s", typ, pc.Error), "" // the fix is in checkPlugin's message (chmod +x ...)
	}
	return []checkFinding{f}
}

// cniVersionOrDefault is the version a list without cniVersion has.
func cniVersionOrDefault(v string) string {
	if v == "" {
		return "0.1.0"
	}
	return v
}
