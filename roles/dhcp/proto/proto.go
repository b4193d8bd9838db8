// Package proto is the protocol between the dhcp role and the dhcp daemon:
// over the daemon's unix stream socket, the role writes one Request as a
// line of JSON, the daemon answers one Response as a line of JSON, and the
// connection closes. It is small on purpose: the role runs in every plugin
// process and must not link an RPC framework.
package proto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cnibox/cnibox/internal/unixsock"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
)

// DefaultSocket is where the daemon listens unless configured otherwise.
const DefaultSocket = "/run/cni/dhcp.sock"

// MaxMessage bounds a request or response line: a request is a few names
// and options, an answer a lease.
const MaxMessage = 64 << 10

// Operations.
const (
	OpAdd    = "add"    // acquire a lease (or return the one held) and keep it renewed
	OpDel    = "del"    // release the lease and forget it
	OpCheck  = "check"  // report the lease held
	OpGC     = "gc"     // release the leases of a network not in Keep
	OpStatus = "status" // answer when alive
)

// Request is what the role asks.
type Request struct {
	Op          string `json:"op"`
	Network     string `json:"network,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	Netns       string `json:"netns,omitempty"`
	Pod         string `json:"pod,omitempty"`
	// Request lists the option codes to ask for (option 55).
	Request []int `json:"request,omitempty"`
	// Provide lists the options to send (option 12, the hostname, among them).
	Provide []Option `json:"provide,omitempty"`
	// Keep lists, for OpGC, the attachments of Network to keep.
	Keep []Attachment `json:"keep,omitempty"`
}

// Option is a DHCP option to send: its code and its value as text, as the
// daemon's lease record keeps it for the renewals.
type Option = lease.Option

// Attachment names one attachment of a network.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Response is the daemon's answer. Error is empty on success; Code is its
// CNI error code.
type Response struct {
	Error string `json:"error,omitempty"`
	Code  uint   `json:"code,omitempty"`
	Lease *Lease `json:"lease,omitempty"`
}

// Lease is what a lease gives the pod, with addresses as text.
type Lease struct {
	Address string    `json:"address"` // CIDR, prefix from the subnet mask
	Gateway string    `json:"gateway,omitempty"`
	Routes  []Route   `json:"routes,omitempty"`
	DNS     DNS       `json:"dns,omitempty"`
	Server  string    `json:"server,omitempty"`
	Expires time.Time `json:"expires"`
}

// Route is a route of a lease.
type Route struct {
	Dst string `json:"dst"`
	GW  string `json:"gw,omitempty"`
}

// DNS is the lease's resolver settings.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
}

// Call sends req to the daemon at socket and returns its response; ctx's
// deadline bounds the whole exchange.
func Call(ctx context.Context, socket string, req *Request) (*Response, error) {
	var resp Response
	if err := unixsock.Call(ctx, socket, MaxMessage, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Serve reads one Request (a line of at most MaxMessage bytes, within
// timeout) from conn, answers it with handle and closes conn.
func Serve(conn net.Conn, timeout time.Duration, handle func(*Request) *Response) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := unixsock.ReadLine(bufio.NewReader(conn), MaxMessage)
	var req Request
	var resp *Response
	switch {
	case errors.Is(err, unixsock.ErrTooLong):
		resp = &Response{Error: fmt.Sprintf("the request is longer than %d bytes", MaxMessage), Code: 6}
	case err != nil:
		return
	default:
		if err := json.Unmarshal(line, &req); err != nil {
			resp = &Response{Error: "decode the request: " + err.Error(), Code: 6}
			break
		}
		_ = conn.SetReadDeadline(time.Time{})
		resp = handle(&req)
	}
	b, _ := json.Marshal(resp)
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	_, _ = conn.Write(append(b, '\n'))
}
