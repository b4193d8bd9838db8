package benchnode

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// Proc is a daemon a bench runs (an agent, flanneld, kube-router): its
// command, its log file and its end.
type Proc struct {
	Cmd  *exec.Cmd
	Log  string // the file its stdout and stderr go to
	done chan error
}

// StartOpts says how Start runs a daemon.
type StartOpts struct {
	Bin    string
	Args   []string
	Env    []string // added to this process's environment (nil: inherited as is)
	Log    string   // its stdout and stderr
	Append bool     // append to Log rather than truncate it (a restarted agent)
	NS     string   // the network namespace's path ("": this process's)
}

// Start runs the daemon: the fork happens on a thread inside o.NS, so the
// process lives there.
func Start(o StartOpts) (*Proc, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if o.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(o.Log, flags, 0o644)
	if err != nil {
		return nil, err
	}
	p := &Proc{Cmd: exec.Command(o.Bin, o.Args...), Log: o.Log, done: make(chan error, 1)}
	p.Cmd.Stdout, p.Cmd.Stderr = f, f
	if o.Env != nil {
		p.Cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := netops.InNetns(o.NS, p.Cmd.Start); err != nil {
		f.Close()
		return nil, err
	}
	go func() { p.done <- p.Cmd.Wait(); f.Close() }()
	return p, nil
}

// Pid is the daemon's process ID.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the daemon has ended, and with what.
func (p *Proc) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Stop ends the daemon with SIGTERM, or SIGKILL after 10 s, and waits for
// it.
func (p *Proc) Stop() {
	if p == nil || p.Cmd.Process == nil {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// LogTail is the last max bytes of the daemon's log.
func (p *Proc) LogTail(max int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// ExitError is the daemon's end as an error naming who (nil while it
// runs), with the tail of its log.
func (p *Proc) ExitError(who string, tail int) error {
	ended, err := p.Exited()
	if !ended {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("exit 0")
	}
	return fmt.Errorf("%s exited (%v):\n%s", who, err, p.LogTail(tail))
}
