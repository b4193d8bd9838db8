package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/nodestate"
)

// Severities of a finding.
const (
	sevError   = "error"
	sevWarning = "warning"
)

// checkFinding is one thing `cnibox check` found in a config file.
type checkFinding struct {
	Severity string `json:"severity"`
	// Path is the field's place in the file ("plugins[0].ipam.ranges[0][0].subnet").
	Path    string `json:"path,omitempty"`
	Value   string `json:"value,omitempty"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// checkedFile is one file `cnibox check` read.
type checkedFile struct {
	File    string `json:"file"`
	Network string `json:"network,omitempty"`
	// Active: the file a runtime picks as its default network in its dir.
	Active bool `json:"active,omitempty"`
	// ShadowedBy names the earlier file of the same network in the dir,
	// which libcni loads instead.
	ShadowedBy string         `json:"shadowedBy,omitempty"`
	Findings   []checkFinding `json:"findings"`

	// loads: libcni loads the file (a list with a plugin at least).
	loads bool
}

// checkReport is `cnibox check`'s answer.
type checkReport struct {
	BinDirs []string `json:"binDirs"`
	// OffNode says why this is not a node ("not root", "no bin dir
	// /opt/cni/bin", "--node=false"): cnibox's roles counted as present
	// and the node was not looked at. "" on a node.
	OffNode  string        `json:"offNode,omitempty"`
	Files    []checkedFile `json:"files"`
	Errors   int           `json:"errors"`
	Warnings int           `json:"warnings"`
}

// checker checks configs against the roles of reg and the plugins in binDirs.
type checker struct {
	reg     *cniplug.Registry
	binDirs []string
	// installing: cnibox's roles are being installed into binDirs[0]
	// (install --conflist), so a role missing there is no finding.
	installing bool
	// offNode, when not "", says why this is not a node (not root, no bin
	// dir): the roles of this binary count as present (see nodeHere).
	offNode string
	// host is the node's namespace, whose interfaces the roles' ADDs need
	// (check --node); nil: the node is not looked at.
	host *netops.Handle
	// env is the rest of the node its ADDs need: files, sockets, kernel
	// features (check --node); nil: not looked at.
	env *nodeEnv
	// versions are the VERSION answers of the foreign plugins asked in
	// this run, by type and cniVersion (nil: not kept).
	versions map[string]pluginCheck
}

// utf8BOM is the UTF-8 byte order mark some editors put first.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// binDirs are the plugin directories: --bin-dir when given, else CNI_PATH
// (as libcni and cnitool take it), else /opt/cni/bin. An empty list (an
// empty --bin-dir) is a usage error.
func binDirs(c *ucli.Context) ([]string, error) {
	var dirs []string
	switch {
	case c.IsSet("bin-dir"):
		dirs = filepath.SplitList(c.String("bin-dir"))
	case os.Getenv("CNI_PATH") != "":
		dirs = filepath.SplitList(os.Getenv("CNI_PATH"))
	default:
		dirs = filepath.SplitList(c.String("bin-dir"))
	}
	dirs = slices.DeleteFunc(dirs, func(d string) bool { return d == "" })
	if len(dirs) == 0 {
		return nil, usageError(c, fmt.Errorf("--bin-dir %q names no directory: give the plugin directory, e.g. --bin-dir /opt/cni/bin", c.String("bin-dir")), false)
	}
	return dirs, nil
}

// runCheck is `cnibox check FILE|DIR...`.
func (o Options) runCheck(c *ucli.Context) error {
	paths, err := argsWithLateFlags(c)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usageError(c, errors.New("check: name a config file or directory (e.g. cnibox check /etc/cni/net.d)"), false)
	}
	dirs, err := binDirs(c)
	if err != nil {
		return err
	}
	ck := checker{reg: o.Registry, binDirs: dirs, versions: map[string]pluginCheck{}}
	done, err := ck.checkPlace(c)
	if err != nil {
		return err
	}
	rep := ck.paths(paths)
	done()
	if err := show(c, rep, printConfigCheck, nil); err != nil {
		return err
	}
	switch {
	case rep.Errors > 0:
		return &exitError{code: 1}
	case rep.Warnings > 0 && c.Bool("strict"):
		return &exitError{code: 2}
	}
	return nil
}

// paths checks files and the config files of directories.
func (ck checker) paths(paths []string) checkReport {
	rep := checkReport{BinDirs: ck.binDirs, OffNode: ck.offNode, Files: []checkedFile{}}
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			rep.Files = append(rep.Files, checkedFile{File: p, Findings: []checkFinding{{Severity: sevError, Message: err.Error(), Fix: "name a config file or the runtime's conf dir"}}})
		case fi.IsDir():
			rep.Files = append(rep.Files, ck.dir(p)...)
		default:
			rep.Files = append(rep.Files, ck.file(p))
		}
	}
	rep.count()
	return rep
}

// count sets Errors and Warnings from the files' findings.
func (rep *checkReport) count() {
	rep.Errors, rep.Warnings = 0, 0
	for _, f := range rep.Files {
		for _, x := range f.Findings {
			if x.Severity == sevError {
				rep.Errors++
			} else {
				rep.Warnings++
			}
		}
	}
}

// file checks one config file.
func (ck checker) file(path string) checkedFile {
	cf := checkedFile{File: path, Findings: []checkFinding{}}
	add := func(f checkFinding) { cf.Findings = append(cf.Findings, f) }
	data, err := nodestate.ReadConf(path)
	if err != nil {
		add(readFinding(err))
		return cf
	}
	return ck.fileData(path, path, data)
}

// readFinding is the finding of a config file or drop-in that
// nodestate.ReadConf refused with err (which names the file): larger than a
// plugin reads, not a regular file (a symlink to /dev/zero, a FIFO), or not
// readable.
func readFinding(err error) checkFinding {
	f := checkFinding{Severity: sevError, Message: err.Error()}
	switch {
	case errors.Is(err, conffile.ErrTooLarge):
		f.Message = fmt.Sprintf("%v, the most a plugin reads: every ADD refuses it", err)
		f.Fix = "make it smaller: move large data (address pools) to a file the config names"
	case errors.Is(err, conffile.ErrNotRegular):
		f.Fix = "make it a regular file holding the config (a symlink to one is fine), or remove it: runtimes read every config file of the conf dir"
	}
	return f
}

// fileData checks data, the content of file path, loaded as a runtime
// loads a file named name (a .conflist as a list).
func (ck checker) fileData(path, name string, data []byte) checkedFile {
	cf := checkedFile{File: path, Findings: []checkFinding{}}
	add := func(f checkFinding) { cf.Findings = append(cf.Findings, f) }
	if len(data) > cniplug.MaxConfigBytes {
		add(checkFinding{Severity: sevError, Value: fmt.Sprintf("%d bytes", len(data)),
			Message: fmt.Sprintf("the config is larger than %d bytes, the most a plugin reads: every ADD refuses it", cniplug.MaxConfigBytes),
			Fix:     "make it smaller: move large data (address pools) to a file the config names"})
		return cf
	}
	if bytes.HasPrefix(data, utf8BOM) {
		add(checkFinding{Severity: sevError, Value: "EF BB BF",
			Message: "the file starts with a UTF-8 byte order mark (BOM), which JSON does not allow: libcni and every plugin refuse it",
			Fix:     "save it as UTF-8 without a BOM (an editor's \"UTF-8\", not \"UTF-8 with BOM\"; or: sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)"})
		return cf
	}
	conflist := strings.HasSuffix(name, ".conflist")
	list, dropIns, err := loadList(path, name, data)
	if errors.Is(err, conffile.ErrTooLarge) || errors.Is(err, conffile.ErrNotRegular) {
		add(readFinding(err)) // a drop-in's
		return cf
	}
	if err != nil {
		add(libcniFinding(err))
		return cf
	}
	cf.Network, cf.loads = list.Name, len(list.Plugins) > 0
	var top map[string]any
	_ = json.Unmarshal(data, &top)
	if list.Plugins != nil && conflist {
		unknownFields(top, merge(nil, listFields()...), "", func(p, field, near string) { add(unknownFinding(p, field, near)) })
	}
	if len(list.Plugins) == 0 {
		add(checkFinding{Severity: sevError, Path: "plugins", Message: "the list has no plugins", Fix: "add the main plugin (e.g. bridge) as plugins[0]"})
	}
	listSeen := map[string]bool{}
	for i, p := range list.Plugins {
		prefix := fmt.Sprintf("plugins[%d]", i)
		if j := i - (len(list.Plugins) - len(dropIns)); j >= 0 {
			prefix += " (" + dropIns[j] + ")"
		} else if !conflist {
			prefix = ""
		}
		for _, f := range ck.plugin(list, p.Bytes, i) {
			if f.Path == "cniVersion" || f.Path == "name" {
				// libcni copies the list's into each plugin: the field
				// is the list's, named once.
				if listSeen[f.Path] {
					continue
				}
				listSeen[f.Path] = true
			} else if f.Path == "" {
				f.Path = prefix
			} else if prefix != "" {
				f.Path = prefix + "." + f.Path
			}
			add(f)
		}
	}
	return cf
}

// libcniFinding is the finding of a file libcni cannot load. A value of
// the wrong JSON type in a field libcni reads itself (a plugin's "dns",
// "capabilities", ...) is worded as every role words one, at its path
// (libcni says "plugin config N" and Go's field).
func libcniFinding(err error) checkFinding {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return checkFinding{Severity: sevError, Message: "libcni cannot load it: " + err.Error(),
			Fix: "fix the JSON (a conflist needs \"name\", \"cniVersion\" and \"plugins\")"}
	}
	path := te.Field
	if m := regexp.MustCompile(`plugin config (\d+)`).FindStringSubmatch(err.Error()); m != nil {
		path = "plugins[" + m[1] + "]." + path
	}
	kind, _, _ := strings.Cut(te.Value, " ")
	return checkFinding{Severity: sevError, Path: path,
		Message: fmt.Sprintf("a JSON %s cannot be read as %s (libcni reads this field)", kind, cniplug.JSONKind(te.Type)),
		Fix:     "write it as docs/roles and the CNI spec give it"}
}

// loadList loads a file as the runtimes do: a .conflist as a list, and
// after its own plugins those of its drop-in directory, DIR/NAME/*.conf
// beside the file (libcni 1.3's NetworkConfFromFile), unless it sets
// loadOnlyInlinedPlugins; anything else as one plugin's config. dropIns
// are the drop-in files, NAME/FILE, of the last plugins.
func loadList(path, name string, data []byte) (list *libcni.NetworkConfigList, dropIns []string, err error) {
	if strings.HasSuffix(name, ".conflist") {
		if list, err = libcni.ConfListFromBytes(data); err != nil || list.LoadOnlyInlinedPlugins {
			return list, nil, err
		}
		// As libcni's NetworkPluginConfsFromFiles, keeping each
		// plugin's file for its findings.
		ds, err := nodestate.DropIns(filepath.Dir(path), list.Name)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range ds {
			list.Plugins = append(list.Plugins, d.Conf)
			dropIns = append(dropIns, filepath.Join(list.Name, filepath.Base(d.Path)))
		}
		return list, dropIns, nil
	}
	//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
	one, err := libcni.ConfFromBytes(data)
	if err != nil {
		return nil, nil, err
	}
	//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
	list, err = libcni.ConfListFromConf(one)
	return list, nil, err
}

// plugin checks the i-th plugin of list, conf as written.
func (ck checker) plugin(list *libcni.NetworkConfigList, conf []byte, i int) []checkFinding {
	var out []checkFinding
	var obj map[string]any
	if err := json.Unmarshal(conf, &obj); err != nil {
		return []checkFinding{{Severity: sevError, Message: "not a JSON object: " + err.Error()}}
	}
	typ, _ := obj["type"].(string)
	role, ours := ck.reg.Lookup(typ)
	out = append(out, ck.binary(typ, "type", list.CNIVersion)...)
	if !ours {
		return out // another plugin's fields are its own business
	}
	out = append(out, ck.chainFindings(list, i, obj, role)...)
	out = append(out, ck.nodeFindings(obj, role)...)
	stdin, err := injectConf(conf, list.Name, list.CNIVersion)
	if err != nil {
		return append(out, checkFinding{Severity: sevError, Message: err.Error()})
	}
	tree := merge(knownTree(role.Known), commonFields()...)
	ipamTyp := ""
	if ipam, ok := obj["ipam"].(map[string]any); ok && role.Chained() {
		(*tree)["ipam"] = nil // ignored: chainFindings says so
	} else if ok {
		ipamTyp, _ = ipam["type"].(string)
		if ir, ok := ck.reg.Lookup(ipamTyp); ok && ir.IPAM {
			(*tree)["ipam"] = merge(knownTree(ir.Known), "type")
			out = append(out, ck.envFindings(ipam, ir, "ipam.")...)
		} else {
			(*tree)["ipam"] = nil // another plugin's section is its own business
		}
		if ipamTyp == "" {
			out = append(out, checkFinding{Severity: sevError, Path: "ipam.type", Message: "the ipam section names no plugin", Fix: "set \"type\" (host-local, static, dhcp, whereabouts, ...)"})
		} else {
			out = append(out, ck.binary(ipamTyp, "ipam.type", list.CNIVersion)...)
		}
	}
	if role.Known != nil && len(role.Known.Config) > 0 {
		unknownFields(obj, tree, "", func(p, field, near string) { out = append(out, unknownFinding(p, field, near)) })
	}
	main := ck.parse(role, stdin, "")
	out = append(out, main...)
	if ir, ok := ck.reg.Lookup(ipamTyp); ok && ir.IPAM {
		for _, f := range ck.parse(ir, stdin, "ipam.type "+ipamTyp) {
			// A field both parsers read (cniVersion, runtimeConfig) is one finding.
			if !slices.ContainsFunc(main, func(m checkFinding) bool { return m.Path == f.Path }) {
				out = append(out, f)
			}
		}
	}
	return out
}

// parse runs role's own parser, as its ADD would, on stdin.
func (ck checker) parse(role *cniplug.Role, stdin []byte, as string) []checkFinding {
	a := &cniplug.Args{ContainerID: "cnibox-check", IfName: "eth0", Path: ck.binDirs, Registry: ck.reg,
		Stderr: io.Discard, Getenv: func(string) string { return "" }}
	err := cniplug.CheckConfig(role, a, stdin)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if as != "" {
		msg = as + ": " + msg
	}
	f := checkFinding{Severity: sevError, Path: fieldOf(err), Message: msg}
	var ce *cniplug.CodedError
	if errors.As(err, &ce) {
		f.Message = fmt.Sprintf("%s (ADD would fail with CNI error %d)", msg, ce.Code)
	}
	return []checkFinding{f}
}

// fieldOf is the field a role's error names (`config field "mtu": ...`),
// for the finding's path; "" when it names none.
func fieldOf(err error) string {
	const lead = `config field "`
	msg := err.Error()
	i := strings.Index(msg, lead)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(lead):]
	if j := strings.IndexByte(rest, '"'); j > 0 {
		return rest[:j]
	}
	return ""
}

// unknownFinding is the warning about a field no role reads.
func unknownFinding(path, field, near string) checkFinding {
	f := checkFinding{Severity: sevWarning, Path: path,
		Message: fmt.Sprintf("%q is a field the plugin does not read: it is ignored", field),
		Fix:     "remove it, or see docs/roles/<type>.md for the fields"}
	if near != "" {
		f.Message = fmt.Sprintf("%q is a field the plugin does not read: did you mean %q?", field, near)
		f.Fix = fmt.Sprintf("rename it to %q", near)
	}
	return f
}

// injectConf is a plugin's config as libcni hands it over: with the list's
// name and cniVersion.
func injectConf(conf []byte, name, version string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, err
	}
	n, _ := json.Marshal(name)
	v, _ := json.Marshal(version)
	m["name"], m["cniVersion"] = n, v
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}
