package tap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestSelinuxContext: on a node without SELinux a valid selinuxContext is
// accepted and changes nothing. On a node that has it (here: one that
// pretends to, whose kernel then refuses the label) the tap is made by a
// thread that takes the label first; that failing fails the ADD with code
// 5 naming the context, and leaves nothing.
func TestSelinuxContext(t *testing.T) {
	n := roletest.NewNode(t, Role, hostlocal.Role)
	ctx := "system_u:system_r:container_t:s0"
	c := []byte(`{"cniVersion":"1.0.0","name":"tapnet","type":"tap","selinuxContext":"` + ctx + `",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.61.0.0/24"}]]}}`)
	if _, err := os.Stat(selinuxEnforce); err == nil {
		t.Skip("this node runs SELinux")
	}
	p := n.NewPod("se")
	_, err := n.Call(Role, "ADD", p, c)
	if err != nil {
		pod, _ := netops.Open(p.Netns)
		_, terr := pod.EnsureTap(netops.TapOpts{Name: "probe0"})
		pod.Close()
		if terr == nil {
			t.Fatalf("ADD with selinuxContext on a node without SELinux: %v", err)
		}
		t.Skipf("no TUN/TAP: %v", terr)
	}
	n.Must(Role, "DEL", p, c)

	fake := filepath.Join(t.TempDir(), "enforce")
	if err := os.WriteFile(fake, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := selinuxEnforce
	selinuxEnforce = fake
	t.Cleanup(func() { selinuxEnforce = old })
	p = n.NewPod("se")
	if _, err := n.Call(Role, "ADD", p, c); roletest.Code(err) != 5 || !strings.Contains(err.Error(), ctx) {
		t.Errorf("ADD with a label the kernel refuses: %v, want code 5 naming it", err)
	}
	pod, _ := netops.Open(p.Netns)
	defer pod.Close()
	if _, err := pod.LinkByName("eth0"); err == nil {
		t.Error("a failed ADD left eth0")
	}
	n.Empty("tapnet")
}
