package multi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// Multus v4's configuration (pkg/types/conf.go NetConf), with Multus'
// defaults and meaning. docs/roles/multi.md says, field by field, where
// cnibox differs.

// Multus' defaults.
const (
	defaultMultusNamespace = "kube-system"
	defaultGlobalNamespace = "default"
	defaultMultusBinDir    = "/opt/cni/bin"
	// readinessWait is how long ADD waits for readinessindicatorfile
	// (Multus polls it for 45 s).
	readinessWait = 45 * time.Second
)

// multusFields are Multus' top-level fields.
type multusFields struct {
	// ClusterNetwork is the primary network: a NAD name (in
	// MultusNamespace), a network name of a file in confDir, a directory
	// (its first config file) or a config file. With it "delegates" is
	// ignored, as in Multus.
	ClusterNetwork string `json:"clusterNetwork"`
	// DefaultNetworks are attached to every pod after the primary, except
	// pods of SystemNamespaces.
	DefaultNetworks  []string  `json:"defaultNetworks"`
	SystemNamespaces *[]string `json:"systemNamespaces"`
	MultusNamespace  string    `json:"multusNamespace"`
	// ReadinessIndicatorFile: ADD waits for it (the primary network is
	// ready once its file exists).
	ReadinessIndicatorFile string `json:"readinessindicatorfile"`
	// NamespaceIsolation: a pod may select NADs of its own namespace and of
	// GlobalNamespaces only.
	NamespaceIsolation bool   `json:"namespaceIsolation"`
	GlobalNamespaces   string `json:"globalNamespaces"`
	// CNIDir is Multus' cache directory: cnibox keeps its records in the
	// store (dataDir) instead; accepted, not used.
	CNIDir string `json:"cniDir"`
	// BinDir is searched for delegate plugins before CNI_PATH.
	BinDir string `json:"binDir"`
	// LogToStderr and LogOptions are Multus' logging switches; cnibox
	// writes warnings to stderr always and its records to logFile.
	LogToStderr *bool           `json:"logToStderr"`
	LogOptions  json.RawMessage `json:"logOptions"`
	// AuxiliaryCNIChainName names a directory next to the clusterNetwork
	// file whose plugin files run as one more network (Multus' passthru
	// chain).
	AuxiliaryCNIChainName string `json:"auxiliaryCNIChainName"`
	// RetryDeleteOnError: cnibox's DEL always goes on past a failing
	// delegate; accepted.
	RetryDeleteOnError bool `json:"retryDeleteOnError"`
	// DaemonSocketDir is the thick shim's socket; cnibox's is agentSocket.
	DaemonSocketDir string `json:"daemonSocketDir"`
}

// multusConf is multusFields with Multus' defaults applied.
type multusConf struct {
	multusFields
	systemNamespaces []string
	globalNamespaces []string
}

func parseMultus(stdin []byte) (*multusConf, error) {
	var m multusConf
	if err := json.Unmarshal(stdin, &m.multusFields); err != nil {
		return nil, nil // decodeError of the caller's parse names the field
	}
	if m.MultusNamespace == "" {
		m.MultusNamespace = defaultMultusNamespace
	}
	m.systemNamespaces = []string{defaultMultusNamespace}
	if m.SystemNamespaces != nil {
		m.systemNamespaces = *m.SystemNamespaces
	}
	m.globalNamespaces = []string{defaultGlobalNamespace}
	if m.GlobalNamespaces != "" {
		m.globalNamespaces = nil
		for _, ns := range strings.Split(m.GlobalNamespaces, ",") {
			m.globalNamespaces = append(m.globalNamespaces, strings.TrimSpace(ns))
		}
	}
	for field, p := range map[string]string{"readinessindicatorfile": m.ReadinessIndicatorFile, "binDir": m.BinDir, "cniDir": m.CNIDir} {
		if p != "" && !filepath.IsAbs(p) {
			return nil, cniplug.ConfError(field, "%q is not an absolute path", p)
		}
	}
	if m.AuxiliaryCNIChainName != "" && !strings.Contains(m.ClusterNetwork, "/") {
		return nil, cniplug.ConfError("auxiliaryCNIChainName", "%q needs \"clusterNetwork\" to be a path (the chain's plugin files are in <directory of clusterNetwork>/%s/), not %q",
			m.AuxiliaryCNIChainName, m.AuxiliaryCNIChainName, m.ClusterNetwork)
	}
	return &m, nil
}

// systemNamespace reports whether ns is one of systemNamespaces (its pods
// get no defaultNetworks).
func (m *multusConf) systemNamespace(ns string) bool { return slices.Contains(m.systemNamespaces, ns) }

// mayReference reports whether a pod of podNS may select a NAD of netNS.
func (m *multusConf) mayReference(podNS, netNS string) bool {
	return !m.NamespaceIsolation || podNS == netNS || slices.Contains(m.globalNamespaces, netNS)
}

// binPath returns CNI_PATH with binDir first, as Multus searches.
func (m *multusConf) binPath(path []string) []string {
	if m == nil || m.BinDir == "" || slices.Contains(path, m.BinDir) {
		return path
	}
	return append([]string{m.BinDir}, path...)
}

// waitReady waits for readinessindicatorfile (ADD): the primary network
// writes it once it is ready. Not there in time is 11 (try again later).
func (m *multusConf) waitReady(ctx context.Context) error {
	if m == nil || m.ReadinessIndicatorFile == "" {
		return nil
	}
	deadline := time.Now().Add(readinessWait)
	for {
		if _, err := os.Stat(m.ReadinessIndicatorFile); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return cniplug.Errorf(types.ErrTryAgainLater, "multi: readinessindicatorfile %s does not exist after %s: the primary network is not ready (has its agent written its config?)", m.ReadinessIndicatorFile, readinessWait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ready reports (STATUS) whether readinessindicatorfile exists: code 50 if
// not.
func (m *multusConf) ready() error {
	if m == nil || m.ReadinessIndicatorFile == "" {
		return nil
	}
	if _, err := os.Stat(m.ReadinessIndicatorFile); err != nil {
		return cniplug.Errorf(cniplug.CodeNotReady, "multi: readinessindicatorfile %s does not exist: the primary network is not ready", m.ReadinessIndicatorFile)
	}
	return nil
}

// hostPath returns path, or, when path does not exist and starts with
// /host/, the same path without /host when that exists: Multus' thick
// daemon writes clusterNetwork as its container sees the node (/host/etc/
// cni/net.d/...), and cnibox runs on the node itself.
func hostPath(path string) string {
	if _, err := os.Stat(path); err == nil || !strings.HasPrefix(path, "/host/") {
		return path
	}
	if alt := strings.TrimPrefix(path, "/host"); fileExists(alt) {
		return alt
	}
	return path
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// netRef is a network named by clusterNetwork, defaultNetworks or the
// default-network annotation, resolved.
type netRef struct {
	body   []byte
	source string // the file, or "NetworkAttachmentDefinition ns/name"
	nad    *agentapi.NetAttachDef
}

// resolvePath reads a clusterNetwork/defaultNetworks path: a directory's
// first .conf/.conflist/.json by name that is not a Multus or multi config
// itself (00-multus.conf sits in the same directory), or the file.
func resolvePath(ref string) (*netRef, error) {
	path := hostPath(ref)
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s does not exist: give the primary network's config file or its directory", ref)
		}
		return nil, cniplug.Errorf(types.ErrIOFailure, "%s: %v", ref, err)
	}
	if !fi.IsDir() {
		b, err := delegateFile.Read(path)
		if err != nil {
			return nil, cniplug.WithCode(types.ErrInvalidNetworkConfig, err)
		}
		return &netRef{body: b, source: path}, nil
	}
	skip := func(f string) bool { return strings.HasPrefix(filepath.Base(f), "00-multus") }
	f, b, err := firstConf(path, skip, func(b []byte) bool { return !isMultiConfig(b) })
	if err != nil {
		return nil, err
	}
	if f != "" {
		return &netRef{body: b, source: f}, nil
	}
	return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s has no network config (*.conf, *.conflist, *.json) besides Multus' own: is the primary network installed?", path)
}

// firstConf returns the first network config file of dir (*.conf,
// *.conflist, *.json, by name) that skip (optional) passes over by its path
// and want takes by its body, with that body; "" and nil when there is
// none, or no dir.
func firstConf(dir string, skip func(path string) bool, want func(body []byte) bool) (string, []byte, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return "", nil, cniplug.Errorf(types.ErrIOFailure, "read %s: %w", dir, err)
	}
	slices.Sort(files)
	for _, f := range files {
		if skip != nil && skip(f) {
			continue
		}
		b, err := delegateFile.Read(f)
		if err != nil {
			return "", nil, err
		}
		if want(b) {
			return f, b, nil
		}
	}
	return "", nil, nil
}

// isMultiConfig reports whether b is a multi/multus config (single or the
// first plugin of a conflist).
func isMultiConfig(b []byte) bool {
	var c struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false
	}
	t := c.Type
	if len(c.Plugins) > 0 {
		t = c.Plugins[0].Type
	}
	return isMultiType(t)
}

// isMultiType reports whether t is a type of this role.
func isMultiType(t string) bool {
	return t == multiPlugin || t == "multus" || t == "multus-shim"
}

// resolveRef finds a network clusterNetwork or defaultNetworks names, in
// Multus' order: a path (with "/"), else the NAD of that name in
// multusNamespace (client may be nil: no pod path), else the file in
// confDir whose network name it is.
func resolveRef(ctx context.Context, client *agentapi.Client, m *multusConf, confDir, ref string) (*netRef, error) {
	if strings.Contains(ref, "/") {
		return resolvePath(ref)
	}
	if client != nil {
		nad, err := client.NetAttachDef(ctx, "", m.MultusNamespace, ref)
		switch {
		case err == nil:
			return nadBody(nad, confDir)
		case !errors.Is(err, agentapi.ErrNotFound):
			return nil, err
		}
	}
	path, b, err := findNetworkFile(confDir, ref)
	if err != nil {
		return nil, err
	}
	if b == nil {
		where := "no file in " + confDir + " (confDir) has that network name"
		if client != nil {
			where = "no NetworkAttachmentDefinition " + m.MultusNamespace + "/" + ref + " (multusNamespace) and " + where
		}
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "network %q: %s: create one", ref, where)
	}
	return &netRef{body: b, source: path}, nil
}

// nadBody is a NAD's config: spec.config, or (empty) the confDir file of
// the NAD's name, as Multus' GetCNIConfig.
func nadBody(nad *agentapi.NetAttachDef, confDir string) (*netRef, error) {
	q := nad.Namespace + "/" + nad.Name
	if strings.TrimSpace(nad.Config) != "" {
		return &netRef{body: []byte(nad.Config), source: "NetworkAttachmentDefinition " + q, nad: nad}, nil
	}
	path, b, err := findNetworkFile(confDir, nad.Name)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "NetworkAttachmentDefinition %s has no spec.config and no file in %s (confDir) has the network name %q: give it one of them", q, confDir, nad.Name)
	}
	return &netRef{body: b, source: path, nad: nad}, nil
}

// delegate turns the resolved body into delegate index of the call, with
// the interface ifname ("" = net<index>).
func (r *netRef) delegate(field string, index int, ifname, version string) (*multiDelegate, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &obj); err != nil || obj == nil {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "%s: %s is not a JSON network config or conflist: %v", field, r.source, err)
	}
	delete(obj, "ifname")
	if ifname != "" {
		obj["ifname"], _ = json.Marshal(ifname)
	}
	if _, ok := obj["name"]; !ok && r.nad != nil {
		obj["name"], _ = json.Marshal(r.nad.Name)
	}
	raw, _ := json.Marshal(obj)
	d, err := resolveDelegate(index, raw, version)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", field, r.source, err)
	}
	d.Field = field
	if strings.HasPrefix(r.source, "/") {
		d.Path = r.source
	}
	if r.nad != nil {
		d.Status = r.nad.Namespace + "/" + r.nad.Name
		d.ResourceName = r.nad.ResourceName
	}
	return d, nil
}
