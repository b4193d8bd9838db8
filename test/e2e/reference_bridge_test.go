package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReferenceBridgeUpstream compares the bridge fields v1.9.1 added
// (Debian's 1.1.1 lacks them) between upstream's reference and cnibox:
// portIsolation with host-local and a gateway, and disableContainerInterface
// without ipam (which the reference refuses with ipam); the pod's interface
// left down shows in the view ("up false"). The latter runs at 0.3.1 only,
// without CHECK: the reference's CHECK of a bridge without ipam fails ("no
// plugin name provided"), cnibox's passes (roles/bridge tests it). No ipam
// routes: cnibox writes their gateway into the result, the reference does not.
func TestReferenceBridgeUpstream(t *testing.T) {
	requireReference(t, "host-local")
	path := []string{upstreamBridge(t), refDir}
	for _, v := range refVersions { // Debian's host-local, which the reference calls, speaks up to 1.0.0
		t.Run(v+"/portIsolation", func(t *testing.T) {
			t.Cleanup(func() { hostHandle(t).DeleteLink("refiso") })
			compareSidesWith(t, path, func(dir string) string {
				return fmt.Sprintf(`{"cniVersion":%q,"name":"iso","plugins":[{"type":"bridge","bridge":"refiso","isGateway":true,"portIsolation":true,"ipam":%s}]}`,
					v, ipamJSON(dir, `[[{"subnet":"10.58.0.0/24","gateway":"10.58.0.1"}]]`, `[]`))
			})
		})
	}
	t.Run("0.3.1/disableContainerInterface", func(t *testing.T) {
		t.Cleanup(func() { hostHandle(t).DeleteLink("refdown") })
		compareSidesWith(t, path, func(string) string {
			return `{"cniVersion":"0.3.1","name":"down","plugins":[{"type":"bridge","bridge":"refdown","disableContainerInterface":true}]}`
		})
	})
}

// upstreamBridge is upstreamRef for the bridge, which skips the test when
// the plugin cannot be had: unlike dummy and tap it needs
// github.com/networkplumbing/go-nft, which an offline machine's module cache
// may lack, and test/kernel builds only the plugins Debian lacks.
func upstreamBridge(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CNIBOX_REF_UPSTREAM"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "bridge")); err != nil {
			t.Skipf("the reference bridge %s is not in $CNIBOX_REF_UPSTREAM %s (%v)", upstreamVersion, dir, err)
		}
		return dir
	}
	dir := filepath.Join(os.TempDir(), "cnibox-e2e-ref-"+upstreamVersion)
	if _, err := os.Stat(filepath.Join(dir, "bridge")); err == nil {
		return dir
	}
	cmd := exec.Command("go", "install", "github.com/containernetworking/plugins/plugins/main/bridge@"+upstreamVersion)
	cmd.Dir = t.TempDir() // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=-trimpath")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot build the reference bridge %s (it needs the module proxy, or its modules, go-nft among them, in the module cache): %v\n%s", upstreamVersion, err, out)
	}
	return dir
}
