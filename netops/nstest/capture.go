package nstest

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SendFrames puts frames, as they are (an Ethernet header of the test's
// own first), on ifname of the namespace at nsPath, in order, through a
// packet socket: nothing of the sender's stack judges or completes them.
func SendFrames(t testing.TB, nsPath, ifname string, frames ...[]byte) error {
	t.Helper()
	proto := htons(unix.ETH_P_ALL)
	return sendOn(t, nsPath, ifname, unix.AF_PACKET, unix.SOCK_RAW, 0, func(ifi *net.Interface, fd int) error {
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: proto}); err != nil {
				return fmt.Errorf("send a frame of %d bytes on %s: %w", len(f), ifname, err)
			}
		}
		return nil
	})
}

// FrameCapture keeps every frame an interface of a namespace receives
// (not those it sends), as the link hands it to the stack: before any
// hook of that namespace, so what it holds crossed everything between
// the sender and the interface.
type FrameCapture struct {
	in *inbox[[]byte]
}

// CaptureFrames starts a FrameCapture on ifname in the namespace at
// nsPath (a packet socket for every protocol); it stops when the test
// ends.
func CaptureFrames(t testing.TB, nsPath, ifname string) *FrameCapture {
	t.Helper()
	f := listenIn(t, nsPath, func() (*os.File, error) {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return nil, err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto))
		if err != nil {
			return nil, err
		}
		err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		}
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: proto})
		}
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("capture on %s: %w", ifname, err)
		}
		return os.NewFile(uintptr(fd), "capture "+ifname), nil // the poller's: Close ends a Read
	})
	c := &FrameCapture{in: newInbox[[]byte]()}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			c.in.add(append([]byte(nil), buf[:n]...))
		}
	}()
	return c
}

// Seen waits up to wait for a frame that match accepts, among those the
// capture got since it started, and reports whether one came.
func (c *FrameCapture) Seen(match func([]byte) bool, wait time.Duration) bool {
	return c.in.seen(0, match, wait)
}

// Frames are the frames the capture got so far.
func (c *FrameCapture) Frames() [][]byte { return c.in.all() }
