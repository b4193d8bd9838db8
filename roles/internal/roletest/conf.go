package roletest

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/cnibox/cnibox/cniplug"
)

// Result decodes an ADD result of version v.
func Result(t *testing.T, out []byte, v string) *current.Result {
	t.Helper()
	r, err := version.NewResult(v, out)
	if err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	return res
}

// Code returns the CNI code of err (0 for nil).
func Code(err error) uint {
	if err == nil {
		return 0
	}
	return cniplug.CodeOf(err)
}

// With returns conf with the given top-level fields set (prevResult,
// cni.dev/valid-attachments, ...).
func With(t *testing.T, conf []byte, fields map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	maps.Copy(m, fields)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WithPrev returns conf with prevResult set to an ADD's output.
func WithPrev(t *testing.T, conf, out []byte) []byte {
	t.Helper()
	return With(t, conf, map[string]any{"prevResult": json.RawMessage(out)})
}

// WithKeep returns conf with GC's valid attachments: eth0 of each pod.
func WithKeep(t *testing.T, conf []byte, keep ...Pod) []byte {
	t.Helper()
	va := []map[string]string{}
	for _, p := range keep {
		va = append(va, map[string]string{"containerID": p.ID, "ifname": "eth0"})
	}
	return With(t, conf, map[string]any{"cni.dev/valid-attachments": va})
}

// Example loads the conflist at path (an examples/ file) and returns the
// Args a call would have for each of its plugins, config decoded.
func Example(t *testing.T, path string) []*cniplug.Args {
	t.Helper()
	l, err := libcni.ConfListFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var all []*cniplug.Args
	for _, p := range l.Plugins {
		a := &cniplug.Args{StdinData: p.Bytes, Conf: &cniplug.NetConf{}}
		if err := json.Unmarshal(p.Bytes, a.Conf); err != nil {
			t.Fatal(err)
		}
		all = append(all, a)
	}
	return all
}
