// Package daemon is the dhcp daemon (`dhcp daemon`): it serves the dhcp
// role's requests on a unix socket (package proto), runs one DHCP client per
// attachment inside the pod's network namespace on the pod's interface,
// renews each lease at T1 and rebinds at T2, and keeps the leases in
// cnibox's store so that a restarted daemon adopts them. Only this package
// links the DHCP library.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/internal/unixsock"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
	"github.com/cnibox/cnibox/store"
)

// Options are the daemon's settings (its flags).
type Options struct {
	Socket     string // -socketpath
	PidFile    string // -pidfile
	HostPrefix string // -hostprefix: where the host's root is mounted (the daemon in a container)
	DataDir    string // -datadir: the store's directory
	Broadcast  bool   // -broadcast: ask the server to broadcast its answers
	// Timeout bounds acquiring a lease (-timeout); ResendMax caps the wait
	// between retransmissions (-resendmax); ResendTimeout bounds the
	// retries of a renewal or rebind before the next try (-resendtimeout).
	Timeout, ResendMax, ResendTimeout time.Duration
	Log                               io.Writer
}

// Main runs the daemon with the reference's flags; args follow "daemon".
func Main(args []string) int {
	fs := flag.NewFlagSet("dhcp daemon", flag.ContinueOnError)
	var o Options
	fs.StringVar(&o.Socket, "socketpath", "", "the unix socket to listen on (default "+proto.DefaultSocket+", under -hostprefix)")
	fs.StringVar(&o.PidFile, "pidfile", "", "write the daemon's PID to this file")
	fs.StringVar(&o.HostPrefix, "hostprefix", "", "the host's root as the daemon sees it (when it runs in a container): prefixes the socket and the pods' namespace paths")
	fs.StringVar(&o.DataDir, "datadir", "", "cnibox's store directory (default $"+store.EnvDataDir+" or "+store.DefaultDir+", under -hostprefix)")
	fs.BoolVar(&o.Broadcast, "broadcast", false, "ask DHCP servers to broadcast their answers")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "how long an ADD tries to get a lease")
	fs.DurationVar(&o.ResendMax, "resendmax", 62*time.Second, "the longest wait between two retransmissions")
	fs.DurationVar(&o.ResendTimeout, "resendtimeout", 28*time.Second, "how long one renewal or rebind retransmits before it waits for the next try")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp daemon:", err)
		return 1
	}
	return 0
}

// Daemon is a running dhcp daemon.
type Daemon struct {
	o   Options
	log *log.Logger

	mu     sync.Mutex // guards leases; never held across a DHCP exchange
	leases map[string]*attachment

	storeMu sync.Mutex // one store transaction of this process at a time
}

// Run serves until ctx ends. Leases stay in the store when it returns, for
// the next daemon to adopt.
func Run(ctx context.Context, o Options) error {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.ResendMax <= 0 {
		o.ResendMax = 62 * time.Second
	}
	if o.ResendTimeout <= 0 {
		o.ResendTimeout = 28 * time.Second
	}
	if o.DataDir == "" {
		o.DataDir = filepath.Join(o.HostPrefix, store.Dir(""))
	}
	d := &Daemon{o: o, log: log.New(o.Log, "dhcp daemon: ", log.LstdFlags), leases: map[string]*attachment{}}
	ln, err := d.listen()
	if err != nil {
		return err
	}
	defer ln.Close()
	if o.PidFile != "" {
		if err := os.WriteFile(o.PidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fmt.Errorf("write -pidfile: %w", err)
		}
	}
	d.adopt(ctx)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	d.log.Printf("listening on %s", ln.Addr())
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				d.stopAll()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		// Root only (SO_PEERCRED), whatever the socket's mode (a shared
		// mount, a mode changed, a socket systemd made).
		if err := unixsock.CheckPeer(conn, unixsock.NoGroup); err != nil {
			d.log.Printf("caller refused: %v", err)
			conn.Close()
			continue
		}
		go proto.Serve(conn, 30*time.Second, func(req *proto.Request) *proto.Response { return d.handle(ctx, req) })
	}
}

// listen takes the socket systemd passes (LISTEN_FDS) or creates
// -socketpath, replacing a stale socket file.
func (d *Daemon) listen() (net.Listener, error) {
	if pid, _ := strconv.Atoi(os.Getenv("LISTEN_PID")); pid == os.Getpid() {
		if n, _ := strconv.Atoi(os.Getenv("LISTEN_FDS")); n >= 1 {
			os.Unsetenv("LISTEN_PID")
			os.Unsetenv("LISTEN_FDS")
			f := os.NewFile(3, "systemd-socket")
			ln, err := net.FileListener(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("the socket systemd passed (fd 3): %w", err)
			}
			return ln, nil
		}
	}
	path := d.o.Socket
	if path == "" {
		path = filepath.Join(d.o.HostPrefix, proto.DefaultSocket)
	}
	// 0600 from the bind on (the umask), root's only: the dhcp role runs
	// as root in the runtime.
	return unixsock.ListenNamed(path, unixsock.NoGroup, "-socketpath", "another daemon answers there")
}

// withStore runs fn on the store, opened for this call only.
func (d *Daemon) withStore(fn func(*store.Store) error) error {
	d.storeMu.Lock()
	defer d.storeMu.Unlock()
	st, err := store.Open(d.o.DataDir)
	if err != nil {
		return err
	}
	err = fn(st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// stopAll ends the renewal loops and closes the clients; the leases stay
// held at the server and in the store.
func (d *Daemon) stopAll() {
	d.mu.Lock()
	all := make([]*attachment, 0, len(d.leases))
	for _, a := range d.leases {
		all = append(all, a)
	}
	d.mu.Unlock()
	for _, a := range all {
		a.stopLoop()
		a.mu.Lock()
		a.closeClient()
		a.mu.Unlock()
	}
}
