package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/agent/multusconf"
)

// TestMultusConfIsolation: --multus-namespace-isolation and
// --multus-global-namespaces (cnibox-multus.yaml's) put namespaceIsolation
// and globalNamespaces into the multi config the agent writes; without
// them the config has neither, so multi keeps Multus' default (off).
func TestMultusConfIsolation(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-flannel.conflist"), []byte(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin := func(args ...string) map[string]any {
		var m multusConfFlags
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		m.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		b, _, err := multusconf.Generate(multusconf.Options{Dir: dir, Extra: m.extra()})
		if err != nil {
			t.Fatal(err)
		}
		var c struct{ Plugins []map[string]any }
		if err := json.Unmarshal(b, &c); err != nil || len(c.Plugins) != 1 {
			t.Fatalf("config %s: %v", b, err)
		}
		return c.Plugins[0]
	}
	on := plugin("--multus-namespace-isolation", "--multus-global-namespaces=default,kube-system")
	if on["namespaceIsolation"] != true || on["globalNamespaces"] != "default,kube-system" {
		t.Errorf("with the flags: %v; want namespaceIsolation true, globalNamespaces default,kube-system", on)
	}
	off := plugin()
	if _, ok := off["namespaceIsolation"]; ok {
		t.Errorf("without the flags: %v; want no namespaceIsolation (Multus' default)", off)
	}
	if _, ok := off["globalNamespaces"]; ok {
		t.Errorf("without the flags: %v; want no globalNamespaces", off)
	}
}
