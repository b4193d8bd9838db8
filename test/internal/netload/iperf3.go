package netload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/netops"
)

// IPerf3 runs Debian's iperf3 between two network namespaces: a one-off
// server (-s -1) bound to Server in ServerNS, the client in ClientNS
// (paths; "" is the caller's own namespace), for Secs seconds a run, on
// Port (0: iperf3's 5201); with PinUDP, UDP's client bound to ClientCPU
// and its server to ServerCPU (-A).
type IPerf3 struct {
	ClientNS, ServerNS   string
	Server               netip.Addr
	Port                 uint16
	Secs                 int
	PinUDP               bool
	ClientCPU, ServerCPU int
}

// TCP returns the rate the server received over streams parallel TCP
// streams (-P), in Gbit/s.
func (p IPerf3) TCP(streams int) (float64, error) {
	out, err := p.run(false, "-P", strconv.Itoa(streams))
	if err != nil {
		return 0, err
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, fmt.Errorf("iperf3 output: %w", err)
	}
	return res.End.SumReceived.BitsPerSecond / 1e9, nil
}

// UDP sends datagrams of size bytes (the UDP payload) as fast as the
// client can (-u -b 0 -l size) and returns the packets a second the server
// received (sent minus lost: dropped anywhere on the path, its own socket
// buffer included).
func (p IPerf3) UDP(size int) (float64, error) {
	out, err := p.run(p.PinUDP, "-u", "-b", "0", "-l", strconv.Itoa(size))
	if err != nil {
		return 0, err
	}
	var res struct {
		End struct {
			SumReceived struct {
				Seconds float64 `json:"seconds"`
				Packets int64   `json:"packets"`
				Lost    int64   `json:"lost_packets"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, fmt.Errorf("iperf3 output: %w", err)
	}
	r := res.End.SumReceived
	if r.Seconds <= 0 {
		return 0, fmt.Errorf("iperf3 UDP: no receiver summary in %s", out)
	}
	return float64(r.Packets-r.Lost) / r.Seconds, nil
}

// run starts the server, runs the client with args (tried again while
// the server is not listening yet) and returns the client's JSON; pin
// binds them to their CPUs.
func (p IPerf3) run(pin bool, args ...string) ([]byte, error) {
	port := "5201"
	if p.Port != 0 {
		port = strconv.Itoa(int(p.Port))
	}
	sargs := []string{"-s", "-1", "-B", p.Server.String(), "-p", port}
	cargs := []string{"-c", p.Server.String(), "-p", port, "-t", strconv.Itoa(p.Secs), "-J"}
	if pin {
		sargs = append(sargs, "-A", strconv.Itoa(p.ServerCPU))
		cargs = append(cargs, "-A", strconv.Itoa(p.ClientCPU))
	}
	server := exec.Command("iperf3", sargs...)
	var serr bytes.Buffer
	server.Stdout, server.Stderr = &serr, &serr
	if err := netops.InNetns(p.ServerNS, server.Start); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() {
		server.Process.Signal(syscall.SIGTERM)
		server.Wait()
	}()
	var out, cerr bytes.Buffer
	var err error
	for try := 0; try < 30; try++ {
		time.Sleep(100 * time.Millisecond)
		out.Reset()
		cerr.Reset()
		client := exec.Command("iperf3", append(cargs, args...)...)
		client.Stdout, client.Stderr = &out, &cerr
		if err = netops.InNetns(p.ClientNS, client.Start); err != nil {
			return nil, fmt.Errorf("iperf3 client: %w", err)
		}
		if err = client.Wait(); err == nil {
			return out.Bytes(), nil
		}
	}
	return nil, fmt.Errorf("iperf3 client %v: %v: %s %s (server: %s)", args, err, out.String(), cerr.String(), serr.String())
}
