//go:build !nokube

package podresources

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// kubelet serves the pod-resources API's List as the kubelet answers it
// (the test's pods; the real kubelet's answer is test/node's).
type kubelet struct {
	v1.UnimplementedPodResourcesListerServer
	pods []*v1.PodResources
}

func (k *kubelet) List(context.Context, *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	return &v1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// serve starts k on a socket of the test's and returns its path.
func serve(t *testing.T, k *kubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1.RegisterPodResourcesListerServer(s, k)
	go s.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(s.Stop)
	return sock
}

func devs(resource string, ids ...string) *v1.ContainerDevices {
	return &v1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// TestPodDevices: the pod's devices of every container, by resource,
// sorted, a device two containers share once; another pod's (same name in
// another namespace) are not the pod's; a pod without devices has none.
func TestPodDevices(t *testing.T) {
	sock := serve(t, &kubelet{pods: []*v1.PodResources{
		{Namespace: "other", Name: "p", Containers: []*v1.ContainerResources{{Name: "c", Devices: []*v1.ContainerDevices{devs("example.com/veth", "vethz")}}}},
		{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{
			{Name: "a", Devices: []*v1.ContainerDevices{devs("example.com/veth", "vethc", "vetha"), devs("intel.com/sriov", "0000:00:05.1")}},
			{Name: "b", Devices: []*v1.ContainerDevices{devs("example.com/veth", "vethb", "vetha")}},
			{Name: "cpu-only"},
		}},
		{Namespace: "ns", Name: "plain", Containers: []*v1.ContainerResources{{Name: "c"}}},
	}})
	c := New(sock)
	defer c.Close()
	got, err := c.PodDevices(context.Background(), "ns", "p", "")
	want := map[string][]string{"example.com/veth": {"vetha", "vethb", "vethc"}, "intel.com/sriov": {"0000:00:05.1"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("PodDevices(ns/p) = %v, %v; want %v", got, err, want)
	}
	if got, err := c.PodDevices(context.Background(), "ns", "plain", ""); err != nil || len(got) != 0 || got == nil {
		t.Errorf("PodDevices(ns/plain) = %#v, %v; want an empty map", got, err)
	}
}

// TestNoKubelet: no kubelet on the socket is the pod API's Unavailable,
// naming the socket and the flag.
func TestNoKubelet(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	c := New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	_, err := c.PodDevices(ctx, "ns", "p", "")
	var ae *agentapi.Error
	if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonUnavailable || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "--pod-resources-socket") {
		t.Errorf("PodDevices without a kubelet = %v; want Unavailable naming %s and --pod-resources-socket", err, sock)
	}
}
