package multi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
)

func TestParseNetworksAnnotation(t *testing.T) {
	tests := []struct {
		name, value string
		want        []networkSelection
	}{
		{"empty", "", nil},
		{"blank", "  ", nil},
		{"one name", "blue", []networkSelection{{Name: "blue", Namespace: "pods"}}},
		{"comma list", "blue, other/red@data1 ,green@net7,", []networkSelection{
			{Name: "blue", Namespace: "pods"},
			{Name: "red", Namespace: "other", Interface: "data1"},
			{Name: "green", Namespace: "pods", Interface: "net7"},
		}},
		{"json list", `[{"name":"blue"},{"name":"red","namespace":"other","interface":"data1","ips":["10.1.1.11/24","fd00::5/64"],"mac":"02:00:00:00:00:01","default-route":["10.1.1.1"]}]`,
			[]networkSelection{
				{Name: "blue", Namespace: "pods"},
				{Name: "red", Namespace: "other", Interface: "data1", IPs: []string{"10.1.1.11/24", "fd00::5/64"}, MAC: "02:00:00:00:00:01", DefaultRoute: &[]string{"10.1.1.1"}},
			}},
		{"json with spaces", ` [ {"name": "blue", "interface": "net1"} ] `, []networkSelection{{Name: "blue", Namespace: "pods", Interface: "net1"}}},
		{"empty json list", `[]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNetworksAnnotation("pods", "pods/p", tt.value)
			if err != nil {
				t.Fatalf("parse %q: %v", tt.value, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parse %q =\n %+v, want\n %+v", tt.value, got, tt.want)
			}
		})
	}
}

func TestParseNetworksAnnotationErrors(t *testing.T) {
	tests := []struct {
		name, value, mention string
	}{
		{"two slashes", "a/b/c", `"a/b/c"`},
		{"two ats", "a@b@c", `"a@b@c"`},
		{"empty namespace", "/blue", `"/blue"`},
		{"empty interface", "blue@", `"blue@"`},
		{"empty name", "ns/@net1", `"ns/@net1"`},
		{"upper case name", "Blue", `"Blue"`},
		{"bad namespace", "Other_ns/blue", `"Other_ns"`},
		{"interface too long", "blue@averyveryverylongname", `"averyveryverylongname"`},
		{"interface with slash", `[{"name":"blue","interface":"a/b"}]`, `"a/b"`},
		{"duplicate interface", "blue@net1, red@net1", `"net1"`},
		{"json not a list", `[{"name":"blue"}`, "not a JSON list"},
		{"json item not an object", `["blue"]`, `item 0 is "blue"`},
		{"json no name", `[{"namespace":"x"}]`, `no "name"`},
		{"json wrong type", `[{"name":"blue","ips":"10.1.1.1/24"}]`, "item 0"},
		{"json bad ip", `[{"name":"blue","ips":["10.1.1.1"]}]`, `"10.1.1.1"`},
		{"json bad mac", `[{"name":"blue","mac":"zz"}]`, `"zz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseNetworksAnnotation("pods", "pods/p", tt.value)
			if err == nil {
				t.Fatalf("parse %q accepted", tt.value)
			}
			msg := err.Error()
			if cniplug.CodeOf(err) != 7 || !strings.Contains(msg, "k8s.v1.cni.cncf.io/networks") || !strings.Contains(msg, "pods/p") || !strings.Contains(msg, tt.mention) {
				t.Errorf("parse %q: %v (code %d); want code 7 naming the pod, the annotation and %s", tt.value, err, cniplug.CodeOf(err), tt.mention)
			}
		})
	}
}
