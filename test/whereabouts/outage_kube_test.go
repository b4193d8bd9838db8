//go:build kube

package whereabouts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// The API server stops answering (SIGSTOP: connections are accepted and
// hang, the case a timeout is for; a server that is gone refuses at once):
// ADD fails with code 11 naming the API server, well before the runtime's
// own deadline, and reserves nothing; DEL succeeds; once the server answers
// again the queued releases are written, and a container added again under
// its ID keeps the address it gets.
func TestKubeOutage(t *testing.T) {
	cnibox, agent := binaries(t)
	cs, kc := kubeCluster(t)
	createPods(t, cs, map[string]string{"before1": "node1", "before2": "node1", "during": "node1"})
	n := startAgent(t, agent, "node1", "", "--kubeconfig-file", kc)
	cb := cniboxPlugin(t, cnibox)
	const rng = "10.74.0.0/24"
	poolName := wbpool.PoolName(rng, "", "")
	conf := `{"cniVersion":"1.0.0","name":"lan","type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"` + rng +
		`","agentSocket":"` + n.socket + `"}}`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, cid := range []string{"before1", "before2"} {
		if _, err := cb.call(ctx, "ADD", cid, "default/"+cid, conf); err != nil {
			t.Fatal(err)
		}
	}

	b, err := os.ReadFile(filepath.Join(filepath.Dir(kc), "apiserver.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			syscall.Kill(pid, syscall.SIGCONT)
			resumed = true
		}
	}
	t.Cleanup(resume)

	duringOutage(t, ctx, cb, "default", conf, "API server")

	resume()
	out, err := cb.call(ctx, "ADD", "before2", "default/before2", conf)
	if err != nil {
		t.Fatalf("ADD once the API server answers: %v", err)
	}
	ip := firstIP(t, out)
	want := fmt.Sprint(map[string]string{ip: "before2"})
	deadline := time.Now().Add(90 * time.Second)
	for {
		held := map[string]string{}
		for addr, a := range ipPool(t, cs, poolName) {
			held[addr] = a.ContainerID
		}
		ps, perr := tryPools(n)
		_, queued := ps[filepath.Join(n.dataDir, "whereabouts-pending")]
		if perr == nil && !queued && fmt.Sprint(held) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("IPPool %s holds %v (releases still queued: %v, %v), want %s (the queued releases written, nothing of the failed ADD)", poolName, held, queued, perr, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
