package nsdir

import (
	"bufio"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/testenv"
)

// mounts returns the optional fields ("shared:N", …) of each mount at dir
// in this process's mount table, one entry per mount.
func mounts(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 6 && fields[4] == dir {
			opt := []string{}
			for _, f := range fields[6:] {
				if f == "-" {
					break
				}
				opt = append(opt, f)
			}
			got = append(got, strings.Join(opt, " "))
		}
	}
	return got
}

// Processes that create their first namespace together make the directory
// one shared mount, not a stack of mounts (which would hide namespaces
// mounted below the top one), and a later call changes nothing.
func TestEnsureOnceShared(t *testing.T) {
	if !testenv.Root() {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir() + "/netns"
	t.Cleanup(func() {
		for range mounts(t, dir) {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Ensure(dir); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	got := mounts(t, dir)
	if len(got) != 1 || !strings.Contains(got[0], "shared:") {
		t.Fatalf("mounts at %s = %q; want one shared mount", dir, got)
	}
}
