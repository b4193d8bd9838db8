//go:build !nokube

package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// maxMsgSize bounds a List answer (a node's pods); the kubelet's own
// client and Multus use 16 MiB.
const maxMsgSize = 16 << 20

// callTimeout bounds one List when the caller's context has no deadline.
const callTimeout = 10 * time.Second

// Client answers PodDevices from the kubelet. It connects on first use
// and keeps the connection (grpc reconnects when the kubelet restarts).
type Client struct {
	socket string

	mu   sync.Mutex
	conn *grpc.ClientConn
}

// New returns a client of the kubelet's pod-resources socket.
func New(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	return &Client{socket: socket}
}

// Close closes the connection, if one was made.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

func (c *Client) client() (v1.PodResourcesListerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		//lint:ignore SA1019 Dial's eager, blocking-free semantics are what the kubelet's socket wants; NewClient changes the default resolver
		conn, err := grpc.Dial("unix://"+c.socket,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
		if err != nil {
			return nil, fmt.Errorf("kubelet pod-resources socket %s: %w", c.socket, err)
		}
		c.conn = conn
	}
	return v1.NewPodResourcesListerClient(c.conn), nil
}

// PodDevices returns the device IDs of every resource the kubelet
// allocated to the pod's containers, each list sorted and without
// duplicates (a device shared by two containers is one device). The
// pod-resources API does not carry the pod's UID: the caller checks it.
// A pod without devices has an empty map.
func (c *Client) PodDevices(ctx context.Context, namespace, name, _ string) (map[string][]string, error) {
	cl, err := c.client()
	if err != nil {
		return nil, unavailable(c.socket, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	// List, not Get: Get is behind the kubelet's KubeletPodResourcesGet
	// feature gate; List works on every kubelet since 1.20.
	resp, err := cl.List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		return nil, unavailable(c.socket, err)
	}
	return devicesOf(resp.GetPodResources(), namespace, name), nil
}

// devicesOf collects the devices of pod namespace/name in pods.
func devicesOf(pods []*v1.PodResources, namespace, name string) map[string][]string {
	devs := map[string][]string{}
	for _, p := range pods {
		if p.GetNamespace() != namespace || p.GetName() != name {
			continue
		}
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				devs[d.GetResourceName()] = append(devs[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
	}
	for r, ids := range devs {
		slices.Sort(ids)
		devs[r] = slices.Compact(ids)
	}
	return devs
}

// unavailable wraps a failure to ask the kubelet as the pod API's
// Unavailable, naming the socket and the flag that sets it.
func unavailable(socket string, err error) error {
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
		switch {
		case s.Code() == codes.Unavailable:
			msg = "the kubelet does not answer (" + msg + "): is the kubelet running, and its pod-resources socket mounted into the agent at this path (--pod-resources-socket)?"
		case errors.Is(err, context.DeadlineExceeded) || s.Code() == codes.DeadlineExceeded:
			msg = "the kubelet did not answer in time"
		}
	}
	return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("kubelet pod-resources API at %s: %s", socket, msg)}
}
