// Package startpages returns to the kernel the pages of the running
// program's own binary that it touched while starting.
//
// A Go daemon's resident set is in good part its binary: the runtime's and
// every package's initialisation (protobuf and gRPC registries, the codecs,
// the Kubernetes and etcd clients' types) touch code and read-only data
// that the steady state never runs again, and the kernel maps the pages
// around each fault with it (fault-around, 64 KiB). In cnibox-agent that
// is 17 to 22 MiB of a 21 to 27 MB binary, most of its RSS at 100 peers.
// When it starts and again after its first sync, the agent unmaps the
// pages of its binary's read-only mappings (madvise MADV_DONTNEED): they
// stay in the page cache, where the kernel keeps or drops them as it does
// any cached file, and a path that needs one again maps it back with a
// minor fault. Only mappings that are the file's own pages are released:
// one holding a private copy of a page (relocations of a PIE binary, a
// debugger's breakpoint: Anonymous above 0 in /proc/self/smaps) would
// lose it, and is left alone, as are the writable data, the heap and the
// stacks.
package startpages

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release unmaps the resident pages of the running binary's read-only
// mappings and returns how many bytes of address space it released.
func Release() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("find the running binary: %w", err)
	}
	maps, err := readOnlyMappings(exe)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range maps {
		// The raw call: the range is not Go memory (no slice over it).
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("release %x-%x of %s: %w", m.start, m.end, exe, e)
		}
		n += int64(m.end - m.start)
	}
	return n, nil
}

// mapping is an address range of /proc/self/smaps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the mappings of file path that are not writable
// (code, read-only data) and hold no private copy of a page (Anonymous: 0
// kB), from /proc/self/smaps.
func readOnlyMappings(path string) ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("read the process's mappings: %w", err)
	}
	defer f.Close()
	var out []mapping
	var cur *mapping // the read-only mapping of path whose fields follow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if !strings.HasSuffix(fs[0], ":") { // start-end perms offset dev inode [path]
			cur = nil
			if len(fs) < 6 || strings.Join(fs[5:], " ") != path || strings.Contains(fs[1], "w") {
				continue
			}
			lo, hi, ok := strings.Cut(fs[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil || e <= s {
				continue
			}
			out = append(out, mapping{uintptr(s), uintptr(e)})
			cur = &out[len(out)-1]
			continue
		}
		if cur != nil && fs[0] == "Anonymous:" && (len(fs) < 2 || fs[1] != "0") {
			out = out[:len(out)-1] // private copies: not the file's pages
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the process's mappings: %w", err)
	}
	return out, nil
}
