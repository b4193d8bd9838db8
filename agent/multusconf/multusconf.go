// Package multusconf keeps cnibox's multi config in front of the node's
// primary CNI config, as Multus' thick daemon keeps 00-multus.conf: it
// finds the primary (the first *.conf, *.conflist or *.json of the CNI
// config directory by name that is not a multi/Multus config), writes a
// conflist that sorts before it, whose one plugin is multi with the
// primary as clusterNetwork, its cniVersion and the capabilities its
// plugins declare, rewrites it when the primary changes, and removes it
// on exit, which leaves the primary as the node's network again.
package multusconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cnibox/cnibox/internal/atomicfile"
)

// Options configure Run.
type Options struct {
	// Dir is the CNI config directory as this process sees it (the node's
	// /etc/cni/net.d, mounted e.g. at /host/etc/cni/net.d).
	Dir string
	// HostDir is the same directory as the node (and so multi) sees it:
	// clusterNetwork names the primary's file there. Default /etc/cni/net.d.
	HostDir string
	// Name is the file written; it must sort before the primary. Default
	// 00-cnibox-multus.conflist.
	Name string
	// Extra are more fields of the multi plugin (readinessindicatorfile,
	// namespaceIsolation, ...); type and clusterNetwork are Run's.
	Extra map[string]any
	// Interval is how often the directory is read again. Default 2 s.
	Interval time.Duration
	// Keep leaves the file in place on exit (Multus' cleanup off).
	Keep bool
	Log  *slog.Logger
}

// DefaultName is the file Run writes by default.
const DefaultName = "00-cnibox-multus.conflist"

// networkName is the generated network's name, Multus' own.
const networkName = "multus-cni-network"

func (o *Options) defaults() {
	if o.HostDir == "" {
		o.HostDir = "/etc/cni/net.d"
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Run writes the config and keeps it current until ctx ends, then removes
// it (unless Keep). Until a primary appears nothing is written.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	var last []byte
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		b, primary, err := Generate(o)
		switch {
		case err != nil:
			o.Log.Warn("multus config: no primary CNI config yet", "dir", o.Dir, "err", err)
		case !slices.Equal(b, last):
			// Atomically: a runtime reads the old config or the new one,
			// never half of one.
			if err := atomicfile.WriteFile(filepath.Join(o.Dir, o.Name), b, 0o644); err != nil {
				o.Log.Error("multus config", "file", filepath.Join(o.Dir, o.Name), "err", err)
			} else {
				o.Log.Info("multus config written over the primary", "file", filepath.Join(o.Dir, o.Name), "primary", primary)
				last = b
			}
		}
		select {
		case <-ctx.Done():
			if !o.Keep && last != nil {
				if err := os.Remove(filepath.Join(o.Dir, o.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("multus config: remove on exit: %w", err)
				}
				o.Log.Info("multus config removed: the primary is the node's network again", "file", filepath.Join(o.Dir, o.Name))
			}
			return nil
		case <-t.C:
		}
	}
}

// Generate returns the config for the primary in o.Dir and the primary's
// file name.
func Generate(o Options) ([]byte, string, error) {
	o.defaults()
	file, conf, err := Primary(o.Dir, o.Name)
	if err != nil {
		return nil, "", err
	}
	plugin := maps.Clone(o.Extra)
	if plugin == nil {
		plugin = map[string]any{}
	}
	if _, ok := plugin["kubernetes"]; !ok {
		plugin["kubernetes"] = true // the pod path (the agent's pod API)
	}
	plugin["type"] = "multi"
	plugin["clusterNetwork"] = filepath.Join(o.HostDir, file)
	if caps := capabilities(conf); len(caps) > 0 {
		plugin["capabilities"] = caps
	}
	version, _ := conf["cniVersion"].(string)
	if version == "" {
		version = "0.3.1"
	}
	b, err := json.MarshalIndent(map[string]any{
		"cniVersion": version, "name": networkName, "plugins": []any{plugin},
	}, "", "  ")
	return append(b, '\n'), file, err
}

// Primary returns the node's primary config: the first file by name with
// libcni's extensions that decodes, is not name (nor another multi or
// Multus config) and has a type or plugins.
func Primary(dir, name string) (string, map[string]any, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	for _, e := range ents { // ReadDir sorts by name
		n := e.Name()
		ext := filepath.Ext(n)
		if e.IsDir() || n == name || strings.HasPrefix(n, "00-multus") || (ext != ".conf" && ext != ".conflist" && ext != ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		var conf map[string]any
		if json.Unmarshal(b, &conf) != nil || isMulti(conf) {
			continue
		}
		if _, ok := conf["plugins"].([]any); ok || conf["type"] != nil {
			return n, conf, nil
		}
	}
	return "", nil, fmt.Errorf("no CNI config (*.conf, *.conflist, *.json) in %s but cnibox's own", dir)
}

// plugins returns a config's plugins (a single plugin config is one).
func plugins(conf map[string]any) []map[string]any {
	list, ok := conf["plugins"].([]any)
	if !ok {
		return []map[string]any{conf}
	}
	var out []map[string]any
	for _, p := range list {
		if m, ok := p.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// isMulti reports whether conf is multi's or Multus' own.
func isMulti(conf map[string]any) bool {
	for _, p := range plugins(conf) {
		switch p["type"] {
		case "multi", "multus", "multus-shim":
			return true
		}
	}
	return false
}

// capabilities is the union of the capabilities the primary's plugins
// declare (true), as Multus' generator collects them: the runtime passes
// those arguments to multi, which hands them to the primary.
func capabilities(conf map[string]any) map[string]bool {
	caps := map[string]bool{}
	for _, p := range plugins(conf) {
		m, _ := p["capabilities"].(map[string]any)
		for k, v := range m {
			if v == true {
				caps[k] = true
			}
		}
	}
	return caps
}
