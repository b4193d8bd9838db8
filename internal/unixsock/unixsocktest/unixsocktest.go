// Package unixsocktest calls a unix socket server as another user, for
// the tests of the servers' peer checks: a socket directory other users
// may enter, and one request sent from a thread that runs with other
// credentials (Linux keeps credentials per thread; the thread is thrown
// away after).
package unixsocktest

import (
	"bufio"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Dir is a new directory every user may enter (t.TempDir's parent is
// private), removed when the test ends.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "unixsocktest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Call connects to the socket at path as uid and gid with the
// supplementary groups, sends the request line and returns the answer line
// ("" when the server closed the connection without one); err is the
// dial's or the exchange's. The caller must be root.
func Call(t testing.TB, path string, uid, gid int, groups []uint32, request string) (answer string, err error) {
	t.Helper()
	type result struct {
		answer string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// never unlocked: the thread, with its changed credentials, ends
		// with this goroutine
		runtime.LockOSThread()
		var gp unsafe.Pointer
		if len(groups) > 0 {
			gp = unsafe.Pointer(&groups[0])
		}
		// raw syscalls: the libc-style wrappers change every thread's
		for _, c := range [][4]uintptr{
			{unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(gp)},
			{unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)},
			{unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)},
		} {
			if _, _, errno := unix.RawSyscall(c[0], c[1], c[2], c[3]); errno != 0 {
				done <- result{err: errno}
				return
			}
		}
		conn, err := net.Dial("unix", path)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte(request + "\n")); err != nil {
			done <- result{err: err}
			return
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if line != "" {
			err = nil
		}
		done <- result{answer: strings.TrimSpace(line), err: err}
	}()
	r := <-done
	runtime.KeepAlive(groups)
	return r.answer, r.err
}
