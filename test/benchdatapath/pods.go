package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
	"github.com/cnibox/cnibox/test/internal/netload"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// addPod makes pod name's namespace, runs the conflist's ADD for it on n
// as a kubelet would (the plugins started in n's namespace) and creates
// its Pod object, Running with the address.
func (in *instance) addPod(n *node, name string) (string, netip.Addr, error) {
	e := in.e
	path, h, err := in.newNS("p" + name)
	if h != nil {
		h.Close()
	}
	if err != nil {
		return "", netip.Addr{}, err
	}
	if n.cni == nil {
		dir, err := e.pluginDir(in.c.kind)
		if err != nil {
			return "", netip.Addr{}, err
		}
		n.cni = libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(n.dir, "cni-cache"), nil)
		if n.list, err = libcni.ConfListFromBytes([]byte(in.conflist(n))); err != nil {
			return "", netip.Addr{}, err
		}
	}
	rt := &libcni.RuntimeConf{ContainerID: in.nsName("p" + name), NetNS: path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", in.kubeNS}, {"K8S_POD_NAME", name}}}
	var res *current.Result
	err = onNode(n, in.c.kind == cniboxKind, func() error {
		r, err := n.cni.AddNetworkList(e.ctx, n.list, rt)
		if err == nil {
			res, err = current.NewResultFromResult(r)
		}
		return err
	})
	if err != nil {
		return "", netip.Addr{}, err
	}
	var ip netip.Addr
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap().Is4() {
			ip = a.Unmap()
		}
	}
	if !ip.IsValid() {
		return "", netip.Addr{}, fmt.Errorf("ADD result without an IPv4 address: %v", res)
	}
	p := policyload.Pod(in.kubeNS, name, n.name, map[string]string{"app": "dp"})
	if p, err = e.cs.CoreV1().Pods(in.kubeNS).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
		return "", netip.Addr{}, err
	}
	policyload.Running(p, ip.String(), n.ip.String())
	if _, err := e.cs.CoreV1().Pods(in.kubeNS).UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		return "", netip.Addr{}, err
	}
	return path, ip, nil
}

// onNode runs a libcni call with the plugins started in n's namespace;
// cnibox's use the node's store and log next to it, not the machine's.
func onNode(n *node, cnibox bool, fn func() error) error {
	if cnibox {
		os.Setenv(store.EnvDataDir, n.dir)
		defer os.Unsetenv(store.EnvDataDir)
		os.Setenv("CNIBOX_LOG_FILE", filepath.Join(n.dir, "cnibox.log"))
		defer os.Unsetenv("CNIBOX_LOG_FILE")
	}
	return netops.InNetns(n.Path, fn)
}

// serve starts the netload server in the namespace at path: this program
// again, serving loadPort and closedPort until it is stopped.
func (in *instance) serve(path string) error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", serveEnv, loadPort, closedPort))
	if in.e.o.pin {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", serveCPUEnv, serverCPU))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netops.InNetns(path, cmd.Start); err != nil {
		return fmt.Errorf("netload server: %w", err)
	}
	in.servers = append(in.servers, cmd)
	return nil
}

// reach waits until a connection from cli reaches ip:port (the server has
// started and the path is up, policies and all).
func (in *instance) reach(cli string, ip netip.Addr, port uint16) error {
	to := netip.AddrPortFrom(ip, port)
	return in.e.waitFor(fmt.Sprintf("a connection to %s", to), in.e.o.timeout, func() (bool, error) {
		c, err := netload.DialFrom(cli, to, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
}
