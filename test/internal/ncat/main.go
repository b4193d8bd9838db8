// Command ncat is the part of Nmap's ncat that the MultiNetworkPolicy e2e
// tests of k8snetworkplumbingwg/multi-networkpolicy-iptables run in their
// pods (test/node's TestKubeMNPE2E puts it into the pod image as /bin/nc,
// statically linked, beside busybox):
//
//	nc -klp PORT                    TCP server on every address, IPv4 and IPv6
//	nc -kl 0.0.0.0 PORT             TCP server on one address
//	nc -vv --udp --keep-open --sh-exec "/bin/cat >&2" --listen PORT
//	                                UDP server
//	echo x | nc -w 1 IP PORT        TCP client (IP may be IPv6)
//	echo x | nc --udp -w 1 IP PORT  UDP client
//
// Options: -l/--listen, -k/--keep-open, -u/--udp, -p PORT (the port to
// listen on), -w/--wait TIME (seconds, or with a unit: 500ms, 2s, 1m),
// -c/--sh-exec CMD, -v/--verbose (repeatable); short options combine
// (-klp 5555, -vv).
//
// TCP server: each connection's bytes go to stdout (with --sh-exec, to
// `/bin/sh -c CMD`'s stdin, its stdout back to the peer); without -k it
// serves one connection. TCP client: exits 0 once it has connected within
// -w and sent stdin, 1 when the connection is refused, not made within -w
// or unreachable, or the send fails.
//
// UDP differs from ncat on purpose, so that a test can tell a datagram a
// policy drops from one it lets through. ncat's UDP client exits 0 once
// its datagram has left the socket: a datagram dropped silently on the
// way or at the peer's ingress looks the same as one delivered. Here the
// server answers every datagram (with the --sh-exec command's output, or,
// when the command prints nothing or there is none, with the datagram
// itself), and the client exits 0 only when a reply arrives within -w
// (default 10 s), 1 on an error (ECONNREFUSED from an ICMP unreachable,
// EPERM from a drop on the sender's own egress) or on no reply. A reply
// is the flow's return traffic, which a policy that allowed the datagram
// lets back.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "Ncat: %v. QUITTING.\n", err)
		os.Exit(2)
	}
	os.Exit(o.run(os.Stdin, os.Stdout, os.Stderr))
}

// options are the command line's.
type options struct {
	listen, keepOpen, udp bool
	verbose               int
	wait                  time.Duration // 0: none given
	shExec                string
	host, port            string
}

// parseArgs reads ncat's options and its [HOST] [PORT] operands.
func parseArgs(args []string) (options, error) {
	var o options
	var operands []string
	value := func(i *int, name string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("option %s needs an argument", name)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			var err error
			switch name {
			case "listen":
				o.listen = true
			case "keep-open":
				o.keepOpen = true
			case "udp":
				o.udp = true
			case "verbose":
				o.verbose++
			case "sh-exec", "wait":
				if !hasVal {
					if val, err = value(&i, "--"+name); err != nil {
						return o, err
					}
				}
				if name == "sh-exec" {
					o.shExec = val
				} else if o.wait, err = parseWait(val); err != nil {
					return o, err
				}
			default:
				return o, fmt.Errorf("unknown option --%s", name)
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				c := a[j]
				switch c {
				case 'l':
					o.listen = true
				case 'k':
					o.keepOpen = true
				case 'u':
					o.udp = true
				case 'v':
					o.verbose++
				case 'p', 'w', 'c':
					// the rest of the word, or the next argument
					val := a[j+1:]
					if val == "" {
						var err error
						if val, err = value(&i, "-"+string(c)); err != nil {
							return o, err
						}
					}
					var err error
					switch c {
					case 'p':
						o.port = val
					case 'w':
						o.wait, err = parseWait(val)
					case 'c':
						o.shExec = val
					}
					if err != nil {
						return o, err
					}
					j = len(a)
				default:
					return o, fmt.Errorf("unknown option -%c", c)
				}
			}
		default:
			operands = append(operands, a)
		}
	}
	switch {
	case len(operands) == 2:
		o.host, o.port = operands[0], operands[1]
	case len(operands) == 1 && o.listen && o.port == "":
		o.port = operands[0]
	case len(operands) == 1 && o.listen:
		o.host = operands[0]
	case len(operands) == 1:
		return o, errors.New("no port given")
	case len(operands) > 2:
		return o, fmt.Errorf("too many operands: %q", operands)
	}
	if o.port == "" {
		return o, errors.New("no port given")
	}
	if n, err := strconv.Atoi(o.port); err != nil || n < 0 || n > 65535 {
		return o, fmt.Errorf("invalid port number %q", o.port)
	}
	if !o.listen && o.host == "" {
		return o, errors.New("no host given")
	}
	return o, nil
}

// parseWait reads a time as ncat does: seconds, or a number with the unit
// ms, s, m or h.
func parseWait(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("invalid wait time %q", s)
}

// addr is the address to dial or listen on.
func (o options) addr() string { return net.JoinHostPort(o.host, o.port) }

// logf writes a verbose line to stderr, as ncat's -v does.
func (o options) logf(stderr io.Writer, format string, args ...any) {
	if o.verbose > 0 {
		fmt.Fprintf(stderr, "Ncat: "+format+"\n", args...)
	}
}

// run does what the options say and returns the exit code.
func (o options) run(stdin io.Reader, stdout, stderr io.Writer) int {
	var err error
	switch {
	case o.listen && o.udp:
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", o.addr()); err == nil {
			o.logf(stderr, "Listening on %s", pc.LocalAddr())
			err = o.serveUDP(pc, stderr)
		}
	case o.listen:
		var ln net.Listener
		if ln, err = net.Listen("tcp", o.addr()); err == nil {
			o.logf(stderr, "Listening on %s", ln.Addr())
			err = o.serveTCP(ln, stdout, stderr)
		}
	case o.udp:
		err = o.udpClient(stdin, stdout)
	default:
		err = o.tcpClient(stdin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "Ncat: %v.\n", err)
		return 1
	}
	return 0
}

// serveTCP accepts connections on ln (one, or with -k until ln closes) and
// handles each.
func (o options) serveTCP(ln net.Listener, stdout, stderr io.Writer) error {
	var mu sync.Mutex // one connection's bytes at a time on stdout
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		o.logf(stderr, "Connection from %s.", c.RemoteAddr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if o.shExec != "" {
				cmd := exec.Command("/bin/sh", "-c", o.shExec)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = c, c, stderr
				if err := cmd.Run(); err != nil {
					o.logf(stderr, "%s: %v", o.shExec, err)
				}
				return
			}
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					mu.Lock()
					stdout.Write(buf[:n])
					mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}()
		if !o.keepOpen {
			wg.Wait()
			return nil
		}
	}
}

// serveUDP answers every datagram on pc (the --sh-exec command's output
// for it, or the datagram itself) until pc closes, or after the first
// without -k.
func (o options) serveUDP(pc net.PacketConn, stderr io.Writer) error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		o.logf(stderr, "Datagram of %d bytes from %s.", n, from)
		reply := buf[:n]
		if o.shExec != "" {
			cmd := exec.Command("/bin/sh", "-c", o.shExec)
			cmd.Stdin, cmd.Stderr = strings.NewReader(string(buf[:n])), stderr
			out, err := cmd.Output()
			if err != nil {
				o.logf(stderr, "%s: %v", o.shExec, err)
			}
			if len(out) > 0 {
				reply = out
			}
		}
		if _, err := pc.WriteTo(reply, from); err != nil {
			o.logf(stderr, "reply to %s: %v", from, err)
		}
		if !o.keepOpen {
			return nil
		}
	}
}

// tcpClient connects within -w and sends stdin.
func (o options) tcpClient(stdin io.Reader) error {
	c, err := net.DialTimeout("tcp", o.addr(), o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.Copy(c, stdin); err != nil {
		return err
	}
	return c.(*net.TCPConn).CloseWrite()
}

// udpNoWait is how long the UDP client waits for a reply without -w.
const udpNoWait = 10 * time.Second

// udpClient sends stdin (at least one datagram, empty if stdin is) and
// waits for a reply within -w.
func (o options) udpClient(stdin io.Reader, stdout io.Writer) error {
	wait := o.wait
	if wait == 0 {
		wait = udpNoWait
	}
	c, err := net.DialTimeout("udp", o.addr(), wait)
	if err != nil {
		return err
	}
	defer c.Close()
	data, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), 60000)
		if _, err := c.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no reply from %s within %v", o.addr(), wait)
		}
		return err
	}
	_, err = stdout.Write(buf[:n])
	return err
}
