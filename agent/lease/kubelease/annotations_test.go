//go:build !nokube

package kubelease

import "testing"

func TestNewAnnotations(t *testing.T) {
	for _, tt := range []struct{ prefix, want string }{
		{"flannel.alpha.coreos.com", "flannel.alpha.coreos.com/backend-data"},
		{"flannel.alpha.coreos.com/", "flannel.alpha.coreos.com/backend-data"},
		{"example.com/net", "example.com/net-backend-data"},
	} {
		a, err := NewAnnotations(tt.prefix)
		if err != nil || a.BackendData != tt.want {
			t.Errorf("NewAnnotations(%q).BackendData = %q, %v; want %q", tt.prefix, a.BackendData, err, tt.want)
		}
	}
	a, _ := NewAnnotations(DefaultAnnotationPrefix)
	if a.SubnetKubeManaged != "flannel.alpha.coreos.com/kube-subnet-manager" || a.PublicIP != "flannel.alpha.coreos.com/public-ip" ||
		a.BackendType != "flannel.alpha.coreos.com/backend-type" || a.PublicIPOverwrite != "flannel.alpha.coreos.com/public-ip-overwrite" {
		t.Errorf("annotations = %+v", a)
	}
	for _, bad := range []string{"a/b/c", "NoDots", "x.y/UPPER"} {
		if _, err := NewAnnotations(bad); err == nil {
			t.Errorf("NewAnnotations(%q) accepted", bad)
		}
	}
}
