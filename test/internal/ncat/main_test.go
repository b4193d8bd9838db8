package main

import (
	"bytes"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParseArgs: every command line of the anchor's tests, and what ncat
// refuses.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args string
		want options
	}{
		{"-klp 5555", options{listen: true, keepOpen: true, port: "5555"}},
		{"-klp5555", options{listen: true, keepOpen: true, port: "5555"}},
		{"-kl 0.0.0.0 5555", options{listen: true, keepOpen: true, host: "0.0.0.0", port: "5555"}},
		{"-vv --udp --keep-open --sh-exec /bin/cat>&2 --listen 6666",
			options{listen: true, keepOpen: true, udp: true, verbose: 2, shExec: "/bin/cat>&2", port: "6666"}},
		{"-w 1 2.2.6.8 5555", options{wait: time.Second, host: "2.2.6.8", port: "5555"}},
		{"--udp -w 1 2.2.6.8 6666", options{udp: true, wait: time.Second, host: "2.2.6.8", port: "6666"}},
		{"-w 1 2001::8 5555", options{wait: time.Second, host: "2001::8", port: "5555"}},
		{"-uw0.5 ::1 7", options{udp: true, wait: 500 * time.Millisecond, host: "::1", port: "7"}},
		{"--wait=2s -c cat -l ::1 7", options{listen: true, wait: 2 * time.Second, shExec: "cat", host: "::1", port: "7"}},
		{"-l -p 7 ::1", options{listen: true, host: "::1", port: "7"}},
	} {
		got, err := parseArgs(strings.Fields(tc.args))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseArgs(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "-l", "1.2.3.4", "-w", "-w 0 1.2.3.4 5", "-w x 1.2.3.4 5", "-x 1.2.3.4 5",
		"--frobnicate 1.2.3.4 5", "1.2.3.4 99999", "1.2.3.4 http", "a b c"} {
		if o, err := parseArgs(strings.Fields(bad)); err == nil {
			t.Errorf("parseArgs(%q) = %+v, want an error", bad, o)
		}
	}
}

// syncBuf is a buffer a server writes while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// client runs `nc [--udp] -w 1 HOST PORT` with stdin and returns its exit
// code, stdout and stderr.
func client(t *testing.T, udp bool, addr net.Addr, stdin string) (int, string, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	o := options{udp: udp, wait: time.Second, host: host, port: port}
	var out, errOut bytes.Buffer
	code := o.run(strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// loopbacks are the loopback addresses this machine has (::1 may be off).
func loopbacks(t *testing.T) []string {
	addrs := []string{"127.0.0.1"}
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		ln.Close()
		addrs = append(addrs, "::1")
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	return addrs
}

// freePort is an address on host nothing listens on (TCP and UDP).
func freePort(t *testing.T, network, host string) net.Addr {
	t.Helper()
	if network == "udp" {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return pc.LocalAddr()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr()
}

// TestTCP: the client sends stdin to a -k server, which prints what each
// connection sent; a refused connection is exit 1.
func TestTCP(t *testing.T) {
	for _, host := range loopbacks(t) {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		var out syncBuf
		done := make(chan error, 1)
		go func() { done <- (options{listen: true, keepOpen: true}).serveTCP(ln, &out, &bytes.Buffer{}) }()
		for _, msg := range []string{"x\n", "y\n"} {
			if code, _, stderr := client(t, false, ln.Addr(), msg); code != 0 {
				t.Errorf("%s: exit %d: %s", host, code, stderr)
			}
		}
		// the connections are served at once: either order
		both := func() bool { s := out.String(); return s == "x\ny\n" || s == "y\nx\n" }
		deadline := time.Now().Add(5 * time.Second)
		for !both() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !both() {
			t.Errorf("%s: the server printed %q, want both connections' bytes", host, out.String())
		}
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("%s: serve: %v", host, err)
		}

		if code, _, stderr := client(t, false, freePort(t, "tcp", host), "x\n"); code != 1 || !strings.Contains(stderr, "refused") {
			t.Errorf("%s: to a closed port: exit %d (%s), want 1, refused", host, code, stderr)
		}
	}
}

// TestTCPOnce: without -k the server ends after its first connection.
func TestTCPOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out syncBuf
	done := make(chan error, 1)
	go func() { done <- (options{listen: true}).serveTCP(ln, &out, &bytes.Buffer{}) }()
	if code, _, stderr := client(t, false, ln.Addr(), "once\n"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	select {
	case err := <-done:
		if err != nil || out.String() != "once\n" {
			t.Errorf("serve: %v, printed %q", err, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not end after its connection")
	}
}

// TestUDP: a reply within -w is exit 0 (the datagram itself, or what
// --sh-exec printed for it); a refused port and a peer that never answers
// (a silent drop) are exit 1.
func TestUDP(t *testing.T) {
	for _, host := range loopbacks(t) {
		for _, tc := range []struct{ shExec, reply string }{
			{"", "x\n"},
			{"/bin/cat >&2", "x\n"}, // the anchor's server: prints nothing
			{"tr x y", "y\n"},
		} {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuf
			done := make(chan error, 1)
			go func() {
				done <- (options{listen: true, keepOpen: true, udp: true, shExec: tc.shExec}).serveUDP(pc, &logs)
			}()
			for range 2 {
				if code, out, stderr := client(t, true, pc.LocalAddr(), "x\n"); code != 0 || out != tc.reply {
					t.Errorf("%s, --sh-exec %q: exit %d, reply %q (%s); want 0, %q", host, tc.shExec, code, out, stderr, tc.reply)
				}
			}
			pc.Close()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			if tc.shExec == "/bin/cat >&2" && logs.String() != "x\nx\n" {
				t.Errorf("cat >&2 wrote %q to the server's stderr, want each datagram", logs.String())
			}
		}

		if code, _, stderr := client(t, true, freePort(t, "udp", host), "x\n"); code != 1 || !strings.Contains(stderr, "refused") {
			t.Errorf("%s: to a closed port: exit %d (%s), want 1, refused", host, code, stderr)
		}

		// a socket that takes datagrams and never answers: a drop
		silent, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, _, stderr := client(t, true, silent.LocalAddr(), "x\n")
		took := time.Since(start)
		silent.Close()
		if code != 1 || !strings.Contains(stderr, "no reply") || took < time.Second {
			t.Errorf("%s: to a peer that never answers: exit %d (%s) after %v, want 1, no reply, after -w 1", host, code, stderr, took)
		}
	}
}
