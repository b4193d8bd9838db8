package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cnibox/cnibox/agent/lease"
)

const (
	etcdURL    = "http://127.0.0.1:2379"
	etcdPrefix = "/coreos.com/network"
)

// etcdRun: N leases written into etcd as flanneld writes them (one etcd
// lease of 24 h each), then the agent starts and leases a subnet of its own.
func etcdRun(o *options, bin string, n int, typ string) (row, error) {
	r := row{}
	dir, err := os.MkdirTemp("", "cnibox-bench-scale-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	stop, cli, err := startEtcd(dir)
	if err != nil {
		return r, err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, etcdPrefix+"/config", `{"Network": "10.0.0.0/8", "SubnetLen": 24, "Backend": {"Type": "`+typ+`"}}`); err != nil {
		return r, err
	}
	ps := peers(n)
	grant, err := cli.Grant(ctx, int64((24 * time.Hour).Seconds()))
	if err != nil {
		return r, err
	}
	for i := 0; i < len(ps); i += 100 {
		var ops []clientv3.Op
		for _, p := range ps[i:min(i+100, len(ps))] {
			v, _ := json.Marshal(leaseAttrs(p, typ))
			ops = append(ops, clientv3.OpPut(keyOf(p), string(v), clientv3.WithLease(grant.ID)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return r, err
		}
	}
	o.logf("etcd: %d leases written", n)

	a, err := newAgent(o, dir, n, typ)
	if err != nil {
		return r, err
	}
	defer a.close()
	t0, err := a.start(bin, "--etcd-endpoints", etcdURL)
	if err != nil {
		return r, err
	}
	done, err := a.converged(o.timeout)
	if err != nil {
		return r, err
	}
	_, _, cpu := a.usage()
	r.ConvergeS, r.ConvergeCPUS = done.Sub(t0).Seconds(), cpu.Seconds()
	o.logf("etcd: converged in %.2fs", r.ConvergeS)
	heapProfile(fmt.Sprintf("etcd-%d-converged.pb.gz", n))
	if r.Mismatches, err = a.settledMismatches(ps); err != nil {
		return r, err
	}
	if err := r.removal(a, ps[n/2], func() error { _, err := cli.Delete(ctx, keyOf(ps[n/2])); return err }); err != nil {
		return r, err
	}
	time.Sleep(o.settle) // steady running: the RSS of the state it holds, not of the last step
	rss, hwm, _ := a.usage()
	r.RSSMiB, r.PeakMiB, r.AnonMiB, r.Load = float64(rss)/1024, float64(hwm)/1024, float64(a.anonKiB)/1024, loadavg()
	heapProfile(fmt.Sprintf("etcd-%d-end.pb.gz", n))
	return r, nil
}

func keyOf(p peer) string {
	return etcdPrefix + "/subnets/" + lease.SubnetKey(p.subnet, netip.Prefix{})
}

// removal deletes peer p with del and times its route's removal.
func (r *row) removal(a *agent, p peer, del func() error) error {
	t := time.Now()
	if err := del(); err != nil {
		return err
	}
	gone, err := a.removed(p.subnet, 30*time.Second)
	if err != nil {
		return err
	}
	r.RemovalMS = float64(gone.Sub(t).Microseconds()) / 1000
	return nil
}

// settledMismatches checks the kernel against the peers, again for a few
// seconds while neighbours and FDB entries may still be on their way after
// the last route (the agent programs the route last).
func (a *agent) settledMismatches(ps []peer) (int, error) {
	var bad int
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if bad, err = a.mismatches(ps); err != nil || bad == 0 {
			return bad, err
		}
	}
	return bad, nil
}

func startEtcd(dir string) (stop func(), cli *clientv3.Client, err error) {
	cmd := exec.Command("etcd", "--data-dir", filepath.Join(dir, "etcd"), "--name", "b",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "b=http://127.0.0.1:2380", "--quota-backend-bytes", "8589934592")
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	stop = func() {
		if cli != nil {
			cli.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	if cli, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		stop()
		return nil, nil, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return stop, cli, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("etcd did not start: %v (log %s)", err, filepath.Join(dir, "etcd.log"))
		}
	}
}
