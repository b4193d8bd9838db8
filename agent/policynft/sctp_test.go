package policynft_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nstest"
)

// Go's net package has no SCTP: the lab's SCTP server and client are raw
// one-to-one (SOCK_STREAM) sockets, handed to the net package once they
// listen or are connected (it takes any stream socket for a TCP one).

// sctpSockets is the error of opening an SCTP socket, tried once.
var sctpSockets = sync.OnceValue(func() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err == nil {
		unix.Close(fd)
	}
	return err
})

var noSCTPLogged sync.Once

// hasSCTP reports whether the kernel has SCTP sockets, so that the lab
// serves and probes SCTP 80. Without them the tests go on with TCP and UDP
// and the first one says why; inside make test-kernel (Debian's kernel,
// sctp loaded) that fails the test.
func hasSCTP(t testing.TB) bool {
	t.Helper()
	err := sctpSockets()
	if err == nil {
		return true
	}
	if !errors.Is(err, unix.ESOCKTNOSUPPORT) && !nstest.KernelLacks(err) {
		t.Fatalf("open an SCTP socket: %v", err)
	}
	if nstest.InTestKernel() {
		t.Fatalf("the test kernel lacks SCTP sockets (%v): is sctp in test/kernel's moduleNames?", err)
	}
	noSCTPLogged.Do(func() {
		t.Logf("no SCTP probes: this kernel has no SCTP sockets (%v); make test-kernel runs them on Debian's stock kernel", err)
	})
	return false
}

// serveSCTP starts SCTP 80 (greeting "hi", as TCP 80 does) in the calling
// thread's namespace: one IPv6 socket that takes IPv4 too (v4-mapped).
func serveSCTP(t testing.TB) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return fmt.Errorf("SCTP socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sctp:80")
	defer f.Close() // FileListener keeps a dup
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return fmt.Errorf("SCTP socket: IPV6_V6ONLY off: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: 80}); err != nil {
		return fmt.Errorf("bind SCTP [::]:80: %w", err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		return fmt.Errorf("listen SCTP [::]:80: %w", err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return fmt.Errorf("SCTP [::]:80 as a listener: %w", err)
	}
	t.Cleanup(func() { ln.Close() })
	go nstest.Greet(ln)
	return nil
}

// connectSCTP reports whether from reaches to on SCTP port: the
// association comes up and the greeting arrives within wait.
func connectSCTP(t *testing.T, from *labPod, to netip.Addr, port uint16, wait time.Duration) bool {
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(port), Addr: to.As16()})
	if to.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(port), Addr: to.As4()}
	}
	var fd int
	if err := nstest.Run(t, from.path, func() error {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
		return err
	}); err != nil {
		t.Errorf("SCTP socket in %s/%s: %v", from.ns, from.name, err)
		return false
	}
	f := os.NewFile(uintptr(fd), "sctp client")
	defer f.Close()
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return false
	}
	// A one-to-one SCTP socket turns writable when its association is
	// established (sctp_poll); a dropped INIT leaves it waiting.
	deadline := time.Now().Add(wait)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		break
	}
	if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
		return false
	}
	c, err := net.FileConn(f)
	if err != nil {
		t.Errorf("SCTP %s as a conn: %v", to, err)
		return false
	}
	defer c.Close()
	c.SetDeadline(deadline)
	buf := make([]byte, 2)
	_, err = io.ReadFull(c, buf)
	return err == nil && string(buf) == "hi"
}
