// Package netload is the load a data-path bench puts on a path between two
// network namespaces: iperf3's TCP (one or more streams) and UDP (small
// packets) runs, and what netperf's TCP_RR and TCP_CRR measure, which
// Debian does not package (netperf is non-free): one-byte transactions on
// one connection (RR: rate and latency percentiles) and connect, one byte
// each way, close (CRR: connections a second).
//
// RR and CRR use blocking sockets through plain system calls, on a thread
// of their own, as netperf does: Go's poller would add its wake-ups to
// every transaction, and a constant added to both sides of a comparison
// shrinks the ratio between them. Each side creates its sockets in the
// network namespace of the calling thread (netops.InNetns).
package netload

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Server answers RR and CRR: each connection gets back what it sends.
type Server struct {
	fd    int
	port  uint16
	mu    sync.Mutex
	conns map[int]bool
	done  chan struct{}
}

// Listen serves TCP on addr (port 0: one the kernel picks) in the calling
// thread's network namespace, each connection on a goroutine of its own
// in blocking reads and writes.
func Listen(addr netip.AddrPort) (*Server, error) {
	fd, err := socket(addr.Addr())
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &Server{fd: fd, conns: map[int]bool{}, done: make(chan struct{})}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		s.port = uint16(sa.Port)
	case *unix.SockaddrInet6:
		s.port = uint16(sa.Port)
	}
	go s.accept()
	return s, nil
}

// Port is the port the server listens on.
func (s *Server) Port() uint16 { return s.port }

// Done is closed when the server has stopped accepting.
func (s *Server) Done() <-chan struct{} { return s.done }

func (s *Server) accept() {
	defer close(s.done)
	for {
		fd, _, err := unix.Accept4(s.fd, unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if err != nil {
			return // shut down
		}
		s.mu.Lock()
		s.conns[fd] = true
		s.mu.Unlock()
		go s.echo(fd)
	}
}

func (s *Server) echo(fd int) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, fd)
		s.mu.Unlock()
		unix.Close(fd)
	}()
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 {
			return // closed or reset
		}
		if writeAll(fd, buf[:n]) != nil {
			return
		}
	}
}

// Close stops accepting and ends every connection.
func (s *Server) Close() {
	unix.Shutdown(s.fd, unix.SHUT_RDWR) // wakes the blocked accept
	<-s.done
	unix.Close(s.fd)
	s.mu.Lock()
	for fd := range s.conns {
		unix.Shutdown(fd, unix.SHUT_RDWR)
	}
	s.mu.Unlock()
}

// timeout bounds each blocking call of a client (connect, a read, a
// write): a broken path is an error, not a hang.
const timeout = 5 * time.Second

// warmup transactions of RR are not counted: the first ones fill the
// caches (neighbours, routes, the connection's own state).
const warmup = 200

// RRResult is one RR run.
type RRResult struct {
	Transactions int
	Elapsed      time.Duration
	P50, P99     time.Duration // of one transaction: a byte out, a byte back
}

// Rate is transactions a second.
func (r RRResult) Rate() float64 { return float64(r.Transactions) / r.Elapsed.Seconds() }

// RR connects to to from the calling thread's network namespace and runs
// one-byte transactions (write one byte, read it back) one after the other
// for d, timing each.
func RR(to netip.AddrPort, d time.Duration) (RRResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := dial(to)
	if err != nil {
		return RRResult{}, err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return RRResult{}, fmt.Errorf("TCP_NODELAY: %w", err)
	}
	buf := []byte{0}
	lat := make([]time.Duration, 0, 1<<17)
	var start, end time.Time
	for i := 0; ; i++ {
		if i == warmup {
			start = time.Now()
			end = start.Add(d)
		}
		t0 := time.Now()
		if i > warmup && !t0.Before(end) {
			break
		}
		buf[0] = byte(i)
		if err := writeAll(fd, buf); err != nil {
			return RRResult{}, fmt.Errorf("transaction %d: write: %w", i, err)
		}
		if err := readFull(fd, buf); err != nil {
			return RRResult{}, fmt.Errorf("transaction %d: read: %w", i, err)
		}
		if buf[0] != byte(i) {
			return RRResult{}, fmt.Errorf("transaction %d: the byte came back as %d", i, buf[0])
		}
		if i >= warmup {
			lat = append(lat, time.Since(t0))
		}
	}
	r := RRResult{Transactions: len(lat), Elapsed: time.Since(start)}
	slices.Sort(lat)
	r.P50, r.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	return r, nil
}

// CRRResult is one CRR run.
type CRRResult struct {
	Connections int
	Elapsed     time.Duration
}

// Rate is connections a second.
func (r CRRResult) Rate() float64 { return float64(r.Connections) / r.Elapsed.Seconds() }

// CRR opens connections to to from the calling thread's network namespace
// one after the other for d, each carrying one byte each way and closed
// with a reset (SO_LINGER 0): no TIME_WAIT, so the client's ports last any
// run. Each connection's first packet is the one that meets a policy's
// rules, conntrack's new entry and the flow log.
func CRR(to netip.AddrPort, d time.Duration) (CRRResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := []byte{1}
	start := time.Now()
	end := start.Add(d)
	k := 0
	for ; time.Now().Before(end); k++ {
		fd, err := dial(to)
		if err != nil {
			return CRRResult{}, fmt.Errorf("connection %d: %w", k, err)
		}
		err = writeAll(fd, buf)
		if err == nil {
			err = readFull(fd, buf)
		}
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
		unix.Close(fd)
		if err != nil {
			return CRRResult{}, fmt.Errorf("connection %d: %w", k, err)
		}
	}
	return CRRResult{Connections: k, Elapsed: time.Since(start)}, nil
}

// PinThread binds the calling thread, which the caller has locked
// (runtime.LockOSThread), to cpu, and returns what binds it back to the
// CPUs it had: a thread goes back to Go's pool when unlocked.
func PinThread(cpu int) (restore func(), err error) {
	var was, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("bind the thread to CPU %d: %w", cpu, err)
	}
	return func() { unix.SchedSetaffinity(0, &was) }, nil
}

// PinProcess binds every thread of this process to cpu (the threads it
// makes later inherit it).
func PinProcess(cpu int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("bind thread %d to CPU %d: %w", tid, cpu, err)
		}
	}
	return nil
}

// Percentile is the nearest-rank p (0 < p <= 1) of sorted values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func socket(a netip.Addr) (int, error) {
	family := unix.AF_INET6
	if a.Unmap().Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	return fd, nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// dial connects a blocking socket whose calls give up after timeout.
func dial(to netip.AddrPort) (int, error) {
	fd, err := socket(to.Addr())
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	// An interrupted connect goes on in the kernel: asking again says
	// EALREADY until it is done, then EISCONN.
	for err = unix.Connect(fd, sockaddr(to)); errors.Is(err, unix.EINTR) || errors.Is(err, unix.EALREADY); {
		time.Sleep(time.Millisecond)
		err = unix.Connect(fd, sockaddr(to))
	}
	if errors.Is(err, unix.EISCONN) {
		err = nil
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %s: %w", to, err)
	}
	return fd, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("connection closed")
		}
		b = b[n:]
	}
	return nil
}
