//go:build kube

package egress

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cnibox/cnibox/test/kube"
)

// applyEgressPolicy creates bin/cnibox.yaml's admission policy
// cnibox-egressgateway and its binding as deploy/kubernetes/cnibox.yaml
// has them, and the ConfigMap they read (its net-conf.json).
func applyEgressPolicy(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/cnibox.yaml")
	must(t, err)
	ctx := context.Background()
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct {
			Kind     string
			Metadata metav1.ObjectMeta
		}
		if yaml.Unmarshal(doc, &meta) != nil {
			continue
		}
		switch {
		case meta.Kind == "ValidatingAdmissionPolicy" && meta.Metadata.Name == "cnibox-egressgateway":
			var p admv1.ValidatingAdmissionPolicy
			must(t, yaml.UnmarshalStrict(doc, &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		case meta.Kind == "ValidatingAdmissionPolicyBinding" && meta.Metadata.Name == "cnibox-egressgateway":
			var p admv1.ValidatingAdmissionPolicyBinding
			must(t, yaml.UnmarshalStrict(doc, &p))
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &p, metav1.CreateOptions{})
			must(t, err)
		case meta.Kind == "ConfigMap" && meta.Metadata.Name == "cnibox":
			var cm corev1.ConfigMap
			must(t, yaml.UnmarshalStrict(doc, &cm))
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, &cm, metav1.CreateOptions{})
			must(t, err)
		}
	}
}

// createGateway creates the gateway of JSON body.
func createGateway(cs kubernetes.Interface, body string) error {
	return cs.CoreV1().RESTClient().Post().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways").
		Body([]byte(body)).SetHeader("Content-Type", "application/json").Do(context.Background()).Error()
}

// refused: what cannot work is refused, the field named: by the schema
// (not an address, an IPv6 address not written canonically, an unknown
// operator, a destination that is not a CIDR, an address of a family no
// destination has) and by the admission policy (an address in
// net-conf.json's cluster networks, IPv4 and IPv6; the policy takes a
// moment to be in force).
func refused(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	gw := func(spec string) string {
		return `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"bad"},"spec":` + spec + `}`
	}
	for _, tc := range []struct{ spec, want string }{
		{`{"egressIPs":["2001:DB8::1"]}`, "spec.egressIPs[0]: Invalid value"},
		{`{"egressIPs":["192.0.2.300"]}`, "must be one IPv4 or IPv6 address"},
		{`{"egressIPs":["fe80::1"]}`, "must be a unicast address a node can hold"},
		{`{"egressIPs":["2001:db8:e6::10"],"destinationCIDRs":["198.51.100.0/24"]}`, "spec.destinationCIDRs: has no CIDR of the family"},
		{`{"egressIPs":["127.0.0.1"]}`, "must be a unicast address a node can hold"},
		{`{"egressIPs":[]}`, "spec.egressIPs"},
		{`{"egressIPs":["192.0.2.10"],"podSelector":{"matchExpressions":[{"key":"a","operator":"Near","values":["x"]}]}}`, "spec.podSelector"},
		{`{"egressIPs":["192.0.2.10"],"destinationCIDRs":["203.0.113.0"]}`, "must be an IPv4 or IPv6 CIDR"},
	} {
		err := createGateway(cs, gw(tc.spec))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gateway %s: %v; want refused with %q", tc.spec, err, tc.want)
		}
	}
	// A dual-stack net-conf.json: the IPv6 network is the cluster's too.
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "cnibox", metav1.GetOptions{})
	must(t, err)
	cm.Data["net-conf.json"] = strings.Replace(cm.Data["net-conf.json"], "{", `{"EnableIPv6": true, "IPv6Network": "fd00:10:244::/56",`, 1)
	_, err = cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
	must(t, err)
	want := "spec.egressIPs: 10.244.3.7, fd00:10:244:3::7 is inside the cluster network 10.244.0.0/16, fd00:10:244::/56 of net-conf.json"
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = createGateway(cs, gw(`{"egressIPs":["192.0.2.10","10.244.3.7","2001:db8:e6::10","fd00:10:244:3::7"]}`)); err != nil && strings.Contains(err.Error(), want) {
			return
		}
		if err == nil {
			cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/bad").Do(context.Background())
		}
	}
	t.Errorf("a gateway with a cluster address, a minute after the policy was created: %v; want refused with %q", err, want)
}

// TestKubeEgressPolicyIPv6Only: the admission policy with a single-stack
// IPv6 net-conf.json (issue 64: "EnableIPv4": false, no "Network"): an
// address inside its IPv6 network is refused, naming that network alone;
// an IPv4 address (no cluster network of its family) and an IPv6 one
// outside pass.
func TestKubeEgressPolicyIPv6Only(t *testing.T) {
	cs, _ := kube.Client(t)
	crd, err := os.ReadFile("../../deploy/kubernetes/egressgateway-crd.yaml")
	must(t, err)
	kube.CreateCRD(t, cs, crd, "/apis/cnibox.io/v1alpha1/egressgateways")
	applyEgressPolicy(t, cs)
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "cnibox", metav1.GetOptions{})
	must(t, err)
	cm.Data["net-conf.json"] = `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`
	_, err = cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
	must(t, err)
	gw := func(name, ips string) string {
		return `{"apiVersion":"cnibox.io/v1alpha1","kind":"EgressGateway","metadata":{"name":"` + name + `"},"spec":{"egressIPs":[` + ips + `]}}`
	}
	want := "spec.egressIPs: fd00:10:244:3::7 is inside the cluster network fd00:10:244::/56 of net-conf.json"
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err = createGateway(cs, gw("bad", `"10.244.3.7","2001:db8:e6::10","fd00:10:244:3::7"`))
		if err != nil && strings.Contains(err.Error(), want) {
			break
		}
		if err == nil {
			must(t, cs.CoreV1().RESTClient().Delete().AbsPath("/apis/cnibox.io/v1alpha1/egressgateways/bad").Do(ctx).Error())
		}
		if time.Now().After(deadline) {
			t.Fatalf("a gateway with an address of the IPv6 cluster network, a minute after the policy was created: %v; want refused with %q", err, want)
		}
	}
	if err := createGateway(cs, gw("good", `"10.244.3.7","2001:db8:e6::10"`)); err != nil {
		t.Errorf("a gateway with an IPv4 address (no IPv4 cluster network) and an IPv6 one outside the cluster network: %v; want it made", err)
	}
}
