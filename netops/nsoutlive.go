package netops

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNSNotShared says a named namespace's bind mount exists in the
// caller's mount namespace only: the namespace goes when that mount
// namespace does.
var ErrNSNotShared = errors.New("the namespace's mount stays in this process's mount namespace")

// CheckNamedNSOutlivesCaller returns an error wrapping ErrNSNotShared when
// the bind mount of /run/netns/<name> will not be seen outside the
// caller's mount namespace, so the namespace goes when the last process of
// that mount namespace exits and later calls find an empty file ("not a
// namespace file"). `ip netns exec` runs its command in a mount namespace
// of its own with every mount a slave of the one it came from (mount
// --make-rslave /): a mount made under a slave never propagates to its
// master. The signals, in order:
//   - /run/netns is a slave mount here (mountinfo's "master:N"): the mount
//     is not propagated back, whatever else is true;
//   - else, when PID 1's mount namespace can be read and is another one,
//     the mount point is looked up in /proc/1/mountinfo (where the kernel
//     propagated it or not).
//
// Otherwise (this is PID 1's mount namespace, or /proc/1 cannot be read,
// as in a container without CAP_SYS_PTRACE) it returns nil. A read error
// of this process's own mountinfo is returned as such.
func CheckNamedNSOutlivesCaller(name string) error {
	path := filepath.Join(NamedNSDir, name)
	tags, found, err := mountTags("/proc/self/mountinfo", NamedNSDir)
	if err != nil {
		return err
	}
	if found && slices.ContainsFunc(tags, func(s string) bool { return strings.HasPrefix(s, "master:") }) {
		return fmt.Errorf("%s: %w (%s is a slave mount here: %s)", path, ErrNSNotShared, NamedNSDir, strings.Join(tags, " "))
	}
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read this process's mount namespace: %w", err)
	}
	pid1, err := os.Readlink("/proc/1/ns/mnt")
	if err != nil || self == pid1 {
		return nil // cannot tell, or PID 1's own
	}
	if _, found, err := mountTags("/proc/1/mountinfo", path); err == nil && !found {
		return fmt.Errorf("%s: %w (this process's mount namespace is %s, PID 1's %s, which does not have it)", path, ErrNSNotShared, self, pid1)
	}
	return nil
}

// mountTags returns the optional fields ("shared:N", "master:N") of the
// last mount at path in the mountinfo file (field 5; the kernel writes a
// space in a path as \040), and whether there is one.
func mountTags(mountinfo, path string) ([]string, bool, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", mountinfo, err)
	}
	defer f.Close()
	want := strings.ReplaceAll(path, " ", `\040`)
	var tags []string
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 7 || fs[4] != want {
			continue
		}
		found, tags = true, nil
		for _, t := range fs[6:] {
			if t == "-" {
				break
			}
			tags = append(tags, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", mountinfo, err)
	}
	return tags, found, nil
}
