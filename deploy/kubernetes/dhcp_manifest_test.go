package kubernetes

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestDHCPDaemonSet: cnibox-dhcp.yaml, the dhcp daemon as an option beside
// cnibox.yaml, is one DaemonSet on every node's network whose container is
// cnibox-multus.yaml's dhcp container (TestMultusDaemonSet checks what it
// reaches under /host) on the same node paths, and it reads no Kubernetes
// object.
func TestDHCPDaemonSet(t *testing.T) {
	var ds *appsv1.DaemonSet
	eachDoc(t, "cnibox-dhcp.yaml", func(kind, doc string) any {
		if kind != "DaemonSet" || ds != nil {
			t.Fatalf("cnibox-dhcp.yaml: a %s besides the one DaemonSet", kind)
		}
		ds = &appsv1.DaemonSet{}
		return ds
	})
	if ds == nil {
		t.Fatal("cnibox-dhcp.yaml holds no DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	if ds.Namespace != "kube-system" || !spec.HostNetwork || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists ||
		spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("DaemonSet %s/%s: hostNetwork %v, tolerations %+v, automountServiceAccountToken %v; want kube-system, the node's network, every taint, no token",
			ds.Namespace, ds.Name, spec.HostNetwork, spec.Tolerations, spec.AutomountServiceAccountToken)
	}
	multus := loadMultus(t).ds.Spec.Template.Spec
	var want corev1.Container
	for _, c := range multus.Containers {
		if c.Name == "dhcp" {
			want = c
		}
	}
	if len(spec.Containers) != 1 || !reflect.DeepEqual(spec.Containers[0], want) {
		t.Fatalf("containers %+v\nwant cnibox-multus.yaml's dhcp container alone: %+v", spec.Containers, want)
	}
	hostPath := func(vols []corev1.Volume) map[string]string {
		out := map[string]string{}
		for _, v := range vols {
			if v.HostPath != nil {
				out[v.Name] = v.HostPath.Path
			}
		}
		return out
	}
	mine, theirs := hostPath(spec.Volumes), hostPath(multus.Volumes)
	for _, vm := range want.VolumeMounts {
		if mine[vm.Name] == "" || mine[vm.Name] != theirs[vm.Name] {
			t.Errorf("volume %s is the node's %q here and %q in cnibox-multus.yaml", vm.Name, mine[vm.Name], theirs[vm.Name])
		}
	}
}
