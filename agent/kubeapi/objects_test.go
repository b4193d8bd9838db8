package kubeapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestDecodeList: the REST client decodes a NodeList by its kind into the
// hand-written types (the scheme knows them by their Go names).
func TestDecodeList(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"apiVersion":"v1","kind":"NodeList","metadata":{"resourceVersion":"7"},"items":[`+
			`{"metadata":{"name":"n1","annotations":{"a":"b"}},"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00::/64"]}}]}`)
	}))
	defer srv.Close()
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &Node{}, &NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.Get().Resource("nodes").Do(context.Background()).Get()
	if err != nil {
		t.Fatal(err)
	}
	l, ok := obj.(*NodeList)
	if !ok {
		t.Fatalf("decoded a %T, want *NodeList", obj)
	}
	if l.ResourceVersion != "7" || len(l.Items) != 1 || l.Items[0].Name != "n1" || l.Items[0].Annotations["a"] != "b" ||
		l.Items[0].Spec.PodCIDR != "10.244.1.0/24" || len(l.Items[0].Spec.PodCIDRs) != 2 {
		t.Errorf("decoded %+v", l)
	}
}

// TestDeepCopy: a copy shares nothing with the original; nil copies to nil.
func TestDeepCopy(t *testing.T) {
	n := &Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{"a": "b"}},
		Spec: NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}}}
	l := &NodeList{Items: []Node{*n}}
	nc := n.DeepCopyObject().(*Node)
	lc := l.DeepCopyObject().(*NodeList)
	n.Annotations["a"], n.Spec.PodCIDRs[0] = "x", "x"
	l.Items[0].Spec.PodCIDRs[0] = "y"
	for what, c := range map[string]*Node{"node": nc, "list item": &lc.Items[0]} {
		if c.Name != "n1" || c.Annotations["a"] != "b" || c.Spec.PodCIDR != "10.244.1.0/24" || c.Spec.PodCIDRs[0] != "10.244.1.0/24" {
			t.Errorf("%s copy changed with the original: %+v", what, c)
		}
	}
	p := &Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"k": "v"}}, Spec: PodSpec{NodeName: "n1"}}
	pc := (&PodList{Items: []Pod{*p}}).DeepCopyObject().(*PodList).Items[0]
	p.Labels["k"] = "x"
	if pc.Name != "p" || pc.Labels["k"] != "v" || pc.Spec.NodeName != "n1" {
		t.Errorf("pod copy = %+v", pc)
	}
	if (*Node)(nil).DeepCopyObject() != nil || (*NodeList)(nil).DeepCopyObject() != nil ||
		(*Pod)(nil).DeepCopyObject() != nil || (*PodList)(nil).DeepCopyObject() != nil {
		t.Error("a nil object copies to a non-nil runtime.Object")
	}
}
