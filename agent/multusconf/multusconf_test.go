package multusconf

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

const flannelConf = `{"name":"cbr0","cniVersion":"0.3.1","plugins":[
 {"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}`

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// generated is what the tests read back of the written file.
type generated struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

func read(t *testing.T, path string) generated {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g generated
	if err := json.Unmarshal(b, &g); err != nil || len(g.Plugins) != 1 {
		t.Fatalf("%s: %s (%v)", path, b, err)
	}
	return g
}

// TestPrimary: the primary is the first config by name that is a CNI
// config and not multi's or Multus' own; Multus' generated file, other
// extensions and undecodable files are skipped.
func TestPrimary(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "00-multus.conf", `{"name":"multus-cni-network","type":"multus-shim","clusterNetwork":"/host/etc/cni/net.d/10-flannel.conflist"}`)
	write(t, dir, "01-broken.conf", `{"name":`)
	write(t, dir, "02-notes.txt", `{"name":"x","type":"bridge"}`)
	write(t, dir, "03-multi.conflist", `{"name":"m","plugins":[{"type":"multi","delegates":[]}]}`)
	write(t, dir, "10-flannel.conflist", flannelConf)
	write(t, dir, "20-other.conf", `{"name":"o","type":"bridge"}`)
	if err := os.Mkdir(filepath.Join(dir, "05-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	file, conf, err := Primary(dir, DefaultName)
	if err != nil || file != "10-flannel.conflist" || conf["name"] != "cbr0" {
		t.Fatalf("Primary = %s %v %v, want 10-flannel.conflist", file, conf["name"], err)
	}
	if _, _, err := Primary(t.TempDir(), DefaultName); err == nil {
		t.Error("Primary of an empty directory: no error")
	}
}

// TestRun: the config is written in front of the primary with its
// version, capabilities and path as the node sees it, and the extra
// fields; a new primary rewrites it; on exit it goes and the primary is
// as it was.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "10-flannel.conflist", flannelConf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Dir: dir, Interval: 20 * time.Millisecond, Extra: map[string]any{"readinessindicatorfile": "/run/flannel/subnet.env"}})
	}()
	path := filepath.Join(dir, DefaultName)
	waitFor(t, func() bool { _, err := os.Stat(path); return err == nil })
	g := read(t, path)
	want := map[string]any{"type": "multi", "kubernetes": true, "clusterNetwork": "/etc/cni/net.d/10-flannel.conflist",
		"capabilities": map[string]any{"portMappings": true}, "readinessindicatorfile": "/run/flannel/subnet.env"}
	if g.CNIVersion != "0.3.1" || g.Name != "multus-cni-network" || !reflect.DeepEqual(g.Plugins[0], want) {
		t.Errorf("written %+v\nwant plugin %v at 0.3.1", g, want)
	}

	write(t, dir, "05-calico.conflist", `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico"},{"type":"bandwidth","capabilities":{"bandwidth":true}}]}`)
	waitFor(t, func() bool { return read(t, path).CNIVersion == "1.0.0" })
	if p := read(t, path).Plugins[0]; p["clusterNetwork"] != "/etc/cni/net.d/05-calico.conflist" || !reflect.DeepEqual(p["capabilities"], map[string]any{"bandwidth": true}) {
		t.Errorf("after a new primary: %v", p)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s is still there after exit: %v", path, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "10-flannel.conflist")); string(b) != flannelConf {
		t.Errorf("the primary changed: %s", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("left in the directory: %v", ents)
	}
}

// TestKeep: with Keep the file stays on exit.
func TestKeep(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "10-flannel.conflist", flannelConf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{Dir: dir, Keep: true, Interval: 20 * time.Millisecond}) }()
	path := filepath.Join(dir, DefaultName)
	waitFor(t, func() bool { _, err := os.Stat(path); return err == nil })
	cancel()
	<-done
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Keep: %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not after 30 s")
		}
	}
}
