package kubernetes

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// wantCaps are the capabilities each container adds to none (ALL
// dropped), by manifest and container, and why (docs/security.md).
var wantCaps = map[string]map[string][]corev1.Capability{
	"cnibox.yaml": {
		"install-cni": nil,                      // writes root's directories as root
		"agent":       {"NET_ADMIN", "NET_RAW"}, // VXLAN device, routes, neighbours, nftables; an egress address's gratuitous ARP
	},
	"cnibox-multus.yaml": {
		"install-cni": nil,
		"agent":       nil, // the pod API, a file in /etc/cni/net.d: no kernel work
		"dhcp":        {"NET_ADMIN", "NET_RAW", "SYS_ADMIN"},
	},
	"cnibox-dhcp.yaml": {
		// setns into the pod's namespace (SYS_ADMIN: TestDaemonCapabilities
		// in roles/dhcp), the packet socket (NET_RAW), addresses
		// (NET_ADMIN)
		"dhcp": {"NET_ADMIN", "NET_RAW", "SYS_ADMIN"},
	},
}

// hostPathsTooWide are host paths no container may mount, or mount a
// parent of: the runtime's sockets (containerd.sock is node root), the
// kubelet's state and credentials, the host's root and /etc.
var hostPathsTooWide = []string{
	"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock", "/run/crio/crio.sock", "/var/run/docker.sock",
	"/var/lib/kubelet/pods", "/var/lib/kubelet/kubeconfig", "/etc/kubernetes", "/etc/shadow", "/proc", "/sys",
}

// TestPodSecurity: every container of every manifest runs under the
// runtime's seccomp profile, drops every capability but the ones wantCaps
// names, cannot gain privileges, has a read-only root filesystem, and
// mounts no host path that holds the runtime's socket or the kubelet's
// secrets; only the agent gets a service account token (not the install
// step, not the dhcp daemon, which parses what anyone on a pod network
// sends).
func TestPodSecurity(t *testing.T) {
	for file, caps := range wantCaps {
		var ds *appsv1.DaemonSet
		eachDoc(t, file, func(kind, doc string) any {
			if kind == "DaemonSet" {
				ds = &appsv1.DaemonSet{}
				return ds
			}
			return nil
		})
		if ds == nil {
			t.Fatalf("%s: no DaemonSet", file)
		}
		spec := ds.Spec.Template.Spec
		if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod's seccompProfile is not RuntimeDefault: %+v", file, sc)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range spec.Volumes {
			vols[v.Name] = v
		}
		containers := append(slices.Clone(spec.InitContainers), spec.Containers...)
		if len(containers) != len(caps) {
			t.Errorf("%s: %d containers, want %d (a new container needs its entry in wantCaps)", file, len(containers), len(caps))
		}
		for _, c := range containers {
			want, ok := caps[c.Name]
			if !ok {
				t.Errorf("%s: container %s is not in wantCaps", file, c.Name)
				continue
			}
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Errorf("%s: container %s has no securityContext with capabilities", file, c.Name)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: container %s is privileged", file, c.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: container %s: allowPrivilegeEscalation %v, want false", file, c.Name, sc.AllowPrivilegeEscalation)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: container %s: readOnlyRootFilesystem %v, want true", file, c.Name, sc.ReadOnlyRootFilesystem)
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, want) {
				t.Errorf("%s: container %s: capabilities drop %v add %v, want drop [ALL] add %v", file, c.Name, sc.Capabilities.Drop, sc.Capabilities.Add, want)
			}
			for _, vm := range c.VolumeMounts {
				v, ok := vols[vm.Name]
				if !ok {
					t.Errorf("%s: container %s mounts %s, not a volume", file, c.Name, vm.Name)
					continue
				}
				if v.HostPath == nil {
					continue
				}
				hp := strings.TrimSuffix(v.HostPath.Path, "/")
				for _, bad := range hostPathsTooWide {
					if bad == hp || strings.HasPrefix(bad, hp+"/") || hp == "" {
						t.Errorf("%s: container %s mounts the host's %s, which holds %s", file, c.Name, v.HostPath.Path, bad)
					}
				}
			}
			// A token only where the API is called: the agent.
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken %v: every container would get the token", file, spec.AutomountServiceAccountToken)
			}
			token := slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
				p := vols[vm.Name].Projected
				return p != nil && slices.ContainsFunc(p.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
			})
			if token != (c.Name == "agent") {
				t.Errorf("%s: container %s mounts a token: %v, want only the agent to", file, c.Name, token)
			}
		}
	}
}
