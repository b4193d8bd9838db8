package cli

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/nodestate"
)

// dir checks the config files of a conf dir as a runtime reads it: the
// files libcni lists, in name order; the first that loads is the default
// network (containerd, CRI-O). Of two files of one network, the one a
// runtime loads by name is libcni's (byName); the other is a warning that
// says which runtimes load it, if any.
func (ck checker) dir(dir string) []checkedFile {
	files, err := libcni.ConfFiles(dir, nodestate.ConfExtensions)
	if err != nil {
		return []checkedFile{{File: dir, Findings: []checkFinding{{Severity: sevError, Message: err.Error()}}}}
	}
	if len(files) == 0 {
		return []checkedFile{{File: dir, Findings: []checkFinding{{Severity: sevError,
			Message: "no *.conf, *.conflist or *.json file: the runtime reports the node's network as not ready",
			Fix:     "put a conflist there (examples/10-bridge.conflist is a start)"}}}}
	}
	if ck.versions == nil {
		ck.versions = map[string]pluginCheck{}
	}
	sort.Strings(files)
	out := make([]checkedFile, 0, len(files))
	active := false
	for _, f := range files {
		cf := ck.file(f)
		if cf.Network != "" && !active {
			cf.Active, active = true, true
		}
		out = append(out, cf)
	}
	pick, stop := byName(out)
	for i := range out {
		cf := &out[i]
		if !cf.loads {
			continue
		}
		p, found := pick[cf.Network]
		switch {
		case !found:
			cf.Findings = append(cf.Findings, checkFinding{Severity: sevWarning, Path: "name", Value: cf.Network,
				Message: fmt.Sprintf("libcni's lookup of network %q by name stops at %s, which does not load (it reads every .conflist, then the .conf and .json files, each in name order, and gives up at the first it cannot load): runtimes that look a network up by name (podman, Multus, cnibox exec --net) do not find this one", cf.Network, filepath.Base(stop)),
				Fix:     "fix or remove " + filepath.Base(stop)})
		case p == cf.File:
		case cf.Active:
			cf.ShadowedBy = p
			cf.Findings = append(cf.Findings, checkFinding{Severity: sevWarning, Path: "name", Value: cf.Network,
				Message: fmt.Sprintf("network %q is also in %s: runtimes that take the dir's first file as the default network (containerd, CRI-O) load this file, those that look the network up by name (podman, Multus, cnibox exec --net) load %s (libcni reads every .conflist before any .conf or .json)", cf.Network, filepath.Base(p), filepath.Base(p)),
				Fix:     fmt.Sprintf("keep network %q in one file: remove this one or %s, or rename the network in one of them", cf.Network, filepath.Base(p))})
		default:
			cf.ShadowedBy = p
			cf.Findings = append(cf.Findings, checkFinding{Severity: sevWarning, Path: "name", Value: cf.Network,
				Message: fmt.Sprintf("network %q is also in %s, which libcni's lookup by name reads first (every .conflist, then the .conf and .json files, each in name order): runtimes load that one and never this file", cf.Network, filepath.Base(p)),
				Fix:     "give this network another name, or remove one of the files"})
		}
	}
	return out
}

// byName is libcni 1.3's lookup of a network by name (LoadConfList, which
// podman, Multus and cnibox exec --net use) over the checked files of one
// dir: every .conflist in name order, then the .conf and .json files in
// name order (its deprecated LoadConf); the first file of the name is the
// one loaded, and a file that does not load ends the lookup with an error.
// pick maps each network found before such a file to its file; stop is that
// file ("" when every file loads).
func byName(files []checkedFile) (pick map[string]string, stop string) {
	var lists, confs []checkedFile
	for _, f := range files {
		if strings.HasSuffix(f.File, ".conflist") {
			lists = append(lists, f)
		} else {
			confs = append(confs, f)
		}
	}
	pick = map[string]string{}
	for _, fs := range [][]checkedFile{lists, confs} {
		sort.Slice(fs, func(i, j int) bool { return fs[i].File < fs[j].File })
		for _, f := range fs {
			if !f.loads {
				return pick, f.File
			}
			if _, ok := pick[f.Network]; !ok {
				pick[f.Network] = f.File
			}
		}
	}
	return pick, ""
}
