// Package unixsock is what cnibox's two local daemons, the agent's pod API
// and the dhcp daemon, do alike on their unix sockets: create the socket
// with its mode from the start (the umask at bind, no window in which
// others could connect), replace a stale one but never a file that is not
// a socket or one another process serves, check who called (SO_PEERCRED,
// SO_PEERGROUPS), and read one bounded line; and what their clients do
// alike: one call, a line of JSON each way (Call).
package unixsock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NoGroup: root only (Listen's and CheckPeer's gid).
const NoGroup = -1

// Listen creates the socket at path (and its directory, 0755): mode 0600,
// or 0660 with group gid when gid is not NoGroup (chown to a group the
// process is not in needs CAP_CHOWN). A stale socket of an earlier run is
// replaced. It sets the process umask for the moment of the bind: call it
// before other goroutines create files.
func Listen(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s: a file that is not a socket is in the way: remove it or choose another socket path", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrServed)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("%s: remove the stale socket: %w", path, err)
		}
	}
	mask := 0o177 // 0600
	if gid != NoGroup {
		mask = 0o117 // 0660, the group still root's until the chown
	}
	old := syscall.Umask(mask)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if gid != NoGroup {
		if err := os.Lchown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: give the socket to group %d: %w (a process outside that group needs CAP_CHOWN)", path, gid, err)
		}
	}
	return ln, nil
}

// ListenNamed is Listen for a daemon's socket, its errors named for the
// operator: what names the socket (a flag, "pod API socket") and prefixes
// every error, and served says, after the path, what to do when another
// process serves it (ErrServed).
func ListenNamed(path string, gid int, what, served string) (net.Listener, error) {
	ln, err := Listen(path, gid)
	switch {
	case errors.Is(err, ErrServed):
		return nil, fmt.Errorf("%s %s: %s", what, path, served)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ln, nil
}

// ErrServed: another process answers on the socket.
var ErrServed = errors.New("another process serves this socket")

// CheckPeer reports an error unless the process at the other end of conn
// runs as root (SO_PEERCRED) or, gid not NoGroup, has gid as its group or
// one of its supplementary groups (SO_PEERGROUPS). The socket's mode is the
// first line; this is the second (a changed mode, a shared mount).
func CheckPeer(conn net.Conn, gid int) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var groups []uint32
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		if cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr == nil && gid != NoGroup && cred.Uid != 0 {
			groups, cerr = peerGroups(int(fd))
		}
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("the caller's credentials: %w", cerr)
	}
	if cred.Uid == 0 {
		return nil
	}
	if gid != NoGroup && (int(cred.Gid) == gid || containsGroup(groups, gid)) {
		return nil
	}
	return fmt.Errorf("peer pid %d uid %d gid %d is neither root nor in the allowed group", cred.Pid, cred.Uid, cred.Gid)
}

func containsGroup(groups []uint32, gid int) bool {
	for _, g := range groups {
		if int(g) == gid {
			return true
		}
	}
	return false
}

// peerGroups is SO_PEERGROUPS: the peer's supplementary groups.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case errno == 0:
			return buf[:n/4], nil
		case errno == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 1<<16:
			buf = make([]uint32, n/4)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
	}
}

// ReadLine reads one line of at most max bytes, without the newline (a
// last line without one counts).
func ReadLine(r *bufio.Reader, max int) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > max {
			return nil, fmt.Errorf("%w: longer than %d bytes", ErrTooLong, max)
		}
		switch {
		case err == nil:
			return out[:len(out)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(out) > 0:
			return out, nil
		default:
			return nil, err
		}
	}
}

// ErrTooLong: a line longer than ReadLine's bound.
var ErrTooLong = errors.New("line too long")
