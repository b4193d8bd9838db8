package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/benchnode"
)

// node is the node namespace of one proxy's run (benchnode.NS): its
// underlay eth0 on the private namespace's bridge, the proxy in it and the
// watch of its map.
type node struct {
	*benchnode.NS
	dir   string
	proc  *benchnode.Proc
	watch *mapWatch
	once  sync.Once
}

// newNode makes a fresh node namespace for a run of the proxy tagged tag
// at n Services.
func (c *cluster) newNode(tag string, n int) (*node, error) {
	name := fmt.Sprintf("sb%s-%d-%d", tag, os.Getpid(), n)
	nd := &node{dir: filepath.Join(cmp.Or(c.o.logs, c.dir), fmt.Sprintf("%s-%d", tag, n))}
	if err := os.MkdirAll(nd.dir, 0o700); err != nil {
		return nil, err
	}
	ns, err := benchnode.NewNS(name, benchnode.Wire{Host: c.h, HostVeth: "sbv" + tag, Bridge: underlayBridge, Addr: nodeAddr})
	if ns == nil {
		return nil, err
	}
	nd.NS = ns
	c.mu.Lock()
	c.node = nd
	c.mu.Unlock()
	if err != nil {
		return nd, err
	}
	// Forwarding on, as on a node (cnibox's agent would set it itself).
	err = nd.H.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"})
	return nd, err
}

// start runs the proxy in the node's namespace, its output in proxy.log.
func (n *node) start(bin string, env []string, args ...string) error {
	p, err := benchnode.Start(benchnode.StartOpts{Bin: bin, Args: args, Env: env, Log: filepath.Join(n.dir, "proxy.log"), NS: n.Path})
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// alive is nil while the proxy runs, else its end: its log's last line
// first (the table shows the first line of an error), then the tail.
func (n *node) alive() error {
	if n.proc == nil {
		return fmt.Errorf("the proxy was not started")
	}
	err := n.proc.ExitError("the proxy", 3000)
	if err == nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(n.proc.LogTail(3000)), "\n")
	return fmt.Errorf("%s: %w", lines[len(lines)-1], err)
}

// close stops the proxy and removes the namespace (its tables go with
// it); once (a signal's cleanup and the run's may both call it).
func (n *node) close() {
	if n == nil {
		return
	}
	n.once.Do(func() {
		n.proc.Stop()
		if n.watch != nil {
			n.watch.close()
		}
		n.NS.Close()
	})
}
