//go:build kube

package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// vethPlugin is a kubelet device plugin (API v1beta1) that advertises
// network interfaces of the node as the devices of one resource, by name:
// what an SR-IOV device plugin does with VFs, small enough for the test.
// It serves its socket in the kubelet's device-plugins directory and
// registers there; Allocate answers each device's name in CNIBOX_VETH.
type vethPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devices  []string

	mu        sync.Mutex
	allocated []string // what the kubelet allocated, in order
	srv       *grpc.Server
	stop      chan struct{}
}

// startVethPlugin serves the plugin in n's device-plugins directory and
// registers it with n's kubelet.
func startVethPlugin(t *testing.T, n *node, resource string, devices ...string) *vethPlugin {
	t.Helper()
	p := &vethPlugin{resource: resource, devices: devices, stop: make(chan struct{})}
	// The node's /var/lib is its own: reach it through its root.
	dir := fmt.Sprintf("/proc/%d/root%s", n.init, pluginapi.DevicePluginPath)
	endpoint := "cnibox-veth.sock"
	sock := filepath.Join(dir, endpoint)
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("device plugin: %v", err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go p.srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(func() { close(p.stop); p.srv.Stop() })

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
	}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("device plugin: register %s with the kubelet: %v", resource, err)
	}
	return p
}

func (p *vethPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once, all healthy, and holds the stream.
func (p *vethPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, d := range p.devices {
		devs = append(devs, &pluginapi.Device{ID: d, Health: pluginapi.Healthy})
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *vethPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !slices.Contains(p.devices, id) {
				return nil, fmt.Errorf("no device %q", id)
			}
		}
		p.mu.Lock()
		p.allocated = append(p.allocated, c.DevicesIds...)
		p.mu.Unlock()
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"CNIBOX_VETH": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *vethPlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Allocated returns the devices the kubelet allocated so far.
func (p *vethPlugin) Allocated() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocated)
}
