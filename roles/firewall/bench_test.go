package firewall_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/store"
)

// BenchmarkAddDel measures the firewall's in-process ADD and DEL of one
// attachment with 1 or 500 attachments on the node, under iptables-nft's
// FORWARD DROP and with no iptables table, and reports their medians
// (add-ms, del-ms). make bench measures the role in podman's chain.
func BenchmarkAddDel(b *testing.B) {
	for _, ipt := range []bool{false, true} {
		for _, pods := range []int{1, 500} {
			b.Run(fmt.Sprintf("iptables=%v/pods=%d", ipt, pods), func(b *testing.B) { benchAddDel(b, ipt, pods) })
		}
	}
}

func benchAddDel(b *testing.B, ipt bool, pods int) {
	nstest.RequireRoot(b)
	if !nstest.InPrivateNetns() {
		b.Fatal("not in the private namespace")
	}
	nft := nstest.RequireProgram(b, "nft", "nftables")
	exec.Command(nft, "flush", "ruleset").Run()
	b.Cleanup(func() { exec.Command(nft, "flush", "ruleset").Run() })
	if ipt {
		if out, err := exec.Command(nstest.RequireProgram(b, "iptables-nft", "iptables"), "-P", "FORWARD", "DROP").CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	dir, netns := b.TempDir(), nstest.NewNS(b, "fwb")
	call := func(cmd string, i int) {
		prev := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":%q}],"ips":[{"address":"10.77.%d.%d/16","interface":0}]}`, netns, i/200, i%200+10)
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"fwbench","type":"firewall","prevResult":%s}`, prev)
		env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": fmt.Sprintf("fwb-%05d", i), "CNI_NETNS": netns,
			"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent", store.EnvDataDir: dir}
		if _, err := cniplug.Invoke(context.Background(), firewall.Role, cniplug.Invocation{
			Getenv: func(k string) string { return env[k] }, Stdin: bytes.NewReader([]byte(conf)), Stderr: io.Discard,
		}); err != nil {
			b.Fatalf("%s %d: %v", cmd, i, err)
		}
	}
	for i := range pods - 1 {
		call("ADD", i)
	}
	var adds, dels []time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		call("ADD", pods+i%1000)
		t1 := time.Now()
		call("DEL", pods+i%1000)
		adds, dels = append(adds, t1.Sub(t0)), append(dels, time.Since(t1))
	}
	b.StopTimer()
	b.ReportMetric(median(adds), "add-ms")
	b.ReportMetric(median(dels), "del-ms")
}

func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}
