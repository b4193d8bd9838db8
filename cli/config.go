package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/cnibox/cnibox/nodestate"
)

// confFile is one file of the config directory.
type confFile struct {
	File       string   `json:"file"`
	Network    string   `json:"network,omitempty"`
	CNIVersion string   `json:"cniVersion,omitempty"`
	Plugins    []string `json:"plugins,omitempty"`
	// Error is why the file cannot be loaded ("" when it can).
	Error string `json:"error,omitempty"`

	list *libcni.NetworkConfigList
}

// pluginCheck is what was found for one plugin type of the active network.
type pluginCheck struct {
	Type string `json:"type"`
	// Kind is "plugin" for an entry of the conflist, "ipam" for an ipam.type.
	Kind string `json:"kind"`
	Path string `json:"path,omitempty"`
	// Target is where the plugin's symlink points, when it is one.
	Target   string   `json:"target,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Error is what is wrong ("" when the plugin is found and speaks the
	// network's cniVersion).
	Error string `json:"error,omitempty"`
}

// configReport is `cnibox inspect config`: which network a runtime would
// use and whether it would work.
type configReport struct {
	ConfDir string     `json:"confDir"`
	BinDir  string     `json:"binDir"`
	Files   []confFile `json:"files"`
	// Active is the file a runtime picks as its default network.
	Active *confFile `json:"active,omitempty"`
	Reason string    `json:"reason"`
	// Valid: the active network passed libcni's ValidateNetworkList and
	// every IPAM plugin it names was found.
	Valid bool `json:"valid"`
	// Error is libcni's ValidateNetworkList error, or why nothing is active.
	Error        string        `json:"error,omitempty"`
	Capabilities []string      `json:"capabilities,omitempty"`
	Plugins      []pluginCheck `json:"plugins,omitempty"`
	// Check is what cnibox check finds in the active file (nil: not run);
	// an error in it makes the config not Valid.
	Check *checkedFile `json:"check,omitempty"`
}

// inspectConfig finds the network a runtime would pick in confDir and
// validates it against binDir.
func inspectConfig(ctx context.Context, confDir, binDir string) configReport {
	rep := configReport{ConfDir: confDir, BinDir: binDir, Files: []confFile{}}
	files, err := libcni.ConfFiles(confDir, nodestate.ConfExtensions)
	if err != nil {
		rep.Error = fmt.Sprintf("read %s: %v", confDir, err)
		rep.Reason = "the config directory cannot be read"
		return rep
	}
	sort.Strings(files)
	var skipped []string
	for _, f := range files {
		cf := confFile{File: f}
		l, err := nodestate.LoadConfFile(f)
		switch {
		case err != nil:
			cf.Error = err.Error()
		case len(l.Plugins) == 0:
			cf.Error = "the list has no plugins"
		default:
			cf.list, cf.Network, cf.CNIVersion = l, l.Name, l.CNIVersion
			for _, p := range l.Plugins {
				cf.Plugins = append(cf.Plugins, p.Network.Type)
			}
		}
		rep.Files = append(rep.Files, cf)
		if rep.Active == nil {
			if cf.list == nil {
				skipped = append(skipped, filepath.Base(f))
			} else {
				rep.Active = &rep.Files[len(rep.Files)-1]
			}
		}
	}
	if rep.Active == nil {
		if len(files) == 0 {
			rep.Reason = fmt.Sprintf("no *.conf, *.conflist or *.json file in %s", confDir)
			rep.Error = "no network config: the runtime reports the node's network as not ready"
		} else {
			rep.Reason = fmt.Sprintf("none of the %d config files in %s loads", len(files), confDir)
			rep.Error = "no loadable network config: fix or remove the broken files"
		}
		return rep
	}
	// Active points into rep.Files; keep it valid.
	active := *rep.Active
	rep.Active = &active
	rep.Reason = fmt.Sprintf("the first loadable of %d config files in %s in file name order (*.conf, *.conflist, *.json), as containerd and CRI-O pick the default network; podman uses every *.conflist by its network name",
		len(files), confDir)
	if len(skipped) > 0 {
		rep.Reason += fmt.Sprintf(". Skipped before it: %s (CRI-O skips a broken file; containerd refuses every config until it is fixed)", strings.Join(skipped, ", "))
	}
	validateActive(ctx, &rep, active.list)
	return rep
}

// validateActive checks the active network's plugins in the bin dir, with
// libcni's ValidateNetworkList for the verdict and a per-plugin look for the
// details (and the IPAM plugins, which libcni does not check).
func validateActive(ctx context.Context, rep *configReport, list *libcni.NetworkConfigList) {
	paths := filepath.SplitList(rep.BinDir)
	cni := libcni.NewCNIConfig(paths, nil)
	caps, err := cni.ValidateNetworkList(ctx, list)
	rep.Valid = err == nil
	if err != nil {
		rep.Error = err.Error()
	}
	sort.Strings(caps)
	rep.Capabilities = caps
	seen := map[string]bool{}
	check := func(typ, kind string) {
		if typ == "" || seen[kind+"/"+typ] {
			return
		}
		seen[kind+"/"+typ] = true
		pc := checkPlugin(ctx, typ, kind, paths, list.CNIVersion)
		if kind == "ipam" && pc.Error != "" {
			rep.Valid = false
		}
		rep.Plugins = append(rep.Plugins, pc)
	}
	for _, p := range list.Plugins {
		check(p.Network.Type, "plugin")
		check(ipamType(p.Bytes), "ipam")
	}
}

// ipamType returns the ipam.type of a plugin config ("" when none).
func ipamType(conf []byte) string {
	var c struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	_ = json.Unmarshal(conf, &c)
	return c.IPAM.Type
}

// checkPlugin finds a plugin in the bin dir and asks it which versions it
// speaks (its VERSION command).
func checkPlugin(ctx context.Context, typ, kind string, paths []string, cniVersion string) pluginCheck {
	pc := pluginCheck{Type: typ, Kind: kind}
	path, err := invoke.FindInPath(typ, paths)
	if err != nil {
		for _, dir := range paths {
			p := filepath.Join(dir, typ)
			if target, lerr := os.Readlink(p); lerr == nil {
				pc.Path, pc.Target = p, target
				pc.Error = fmt.Sprintf("dangling symlink to %s: rerun cnibox install --dir %s", target, dir)
				return pc
			}
		}
		pc.Error = fmt.Sprintf("not found in %s: install it (cnibox install --dir %s creates every cnibox role)", strings.Join(paths, ":"), paths[0])
		return pc
	}
	pc.Path = path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		pc.Target, _ = os.Readlink(path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&0o111 == 0 {
		pc.Error = "not executable: chmod +x " + path
		return pc
	}
	vi, err := invoke.GetVersionInfo(ctx, path, nil)
	if err != nil {
		pc.Error = fmt.Sprintf("VERSION failed: %v", err)
		return pc
	}
	pc.Versions = vi.SupportedVersions()
	v := cniVersion
	if v == "" {
		v = "0.1.0"
	}
	if !slices.Contains(pc.Versions, v) {
		pc.Error = fmt.Sprintf("does not speak cniVersion %q of the network: change the config's cniVersion to one of %v", v, pc.Versions)
	}
	return pc
}
