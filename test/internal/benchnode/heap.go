package benchnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// SaveHeap saves the heap profile of the agent in the network namespace
// at ns ("" the harness's own) as $CNIBOX_BENCH_HEAP_DIR/name when the
// agent serves pprof ($CNIBOX_AGENT_PPROF, an agent built with -tags
// cniboxprof; each namespace has its own loopback, so every node's agent
// serves on the same address); otherwise it does nothing. A failure is
// reported on stderr (what says whose harness), not returned: the profile
// is an aside of the benchmark. The agent collects its garbage first
// (gc=1): a profile's in-use bytes are those of the last collection, which
// may have run in the middle of a transaction. Read it with go tool pprof
// -sample_index=inuse_space.
func SaveHeap(what, ns, name string) {
	dir, addr := os.Getenv("CNIBOX_BENCH_HEAP_DIR"), os.Getenv("CNIBOX_AGENT_PPROF")
	if dir == "" || addr == "" {
		return
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netops.InNetns(ns, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: dial}}
	err := func() error {
		resp, err := client.Get("http://" + addr + "/debug/pprof/heap?gc=1")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /debug/pprof/heap: %s", resp.Status)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: heap profile %s: %v\n", what, name, err)
	}
}
