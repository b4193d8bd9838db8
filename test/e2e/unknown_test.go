package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// TestUnknownPluginName: cnibox linked under a plugin name it does not have
// answers every verb with CNI error JSON (code 4, naming the roles it has),
// so a runtime (here libcni, as podman and containerd use it) reports the
// missing plugin instead of failing to parse the answer.
func TestUnknownPluginName(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(cniboxBin(t), filepath.Join(dir, "nosuchplugin")); err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfig([]string{dir}, nil)
	_, err := cni.GetVersionInfo(context.Background(), "nosuchplugin")
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(te.Msg, "bridge") {
		t.Errorf("VERSION of an unknown name: %v, want CNI error 4 naming the roles", err)
	}
	conf, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"u","plugins":[{"type":"nosuchplugin"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: "unknown1", NetNS: "/proc/self/ns/net", IfName: "eth0"}
	for verb, call := range map[string]func() error{
		"ADD": func() error { _, err := cni.AddNetworkList(context.Background(), conf, rt); return err },
		"DEL": func() error { return cni.DelNetworkList(context.Background(), conf, rt) },
	} {
		err := call()
		if !errors.As(err, &te) || te.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(te.Msg, "nosuchplugin") {
			t.Errorf("%s of an unknown name: %v, want CNI error 4 naming it", verb, err)
		}
	}
}
