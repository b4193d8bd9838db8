package main

import (
	"io"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent/clusteripam"
)

// TestNodeSliceSizeFlag: --cluster-ipam-node-slice-size (and
// FLANNELD_CLUSTER_IPAM_NODE_SLICE_SIZE, as every flag) is off by default,
// takes one size per family (a length of at most 32 is IPv4's), and
// refuses at start what would leave a slice without a usable address,
// naming the flag.
func TestNodeSliceSizeFlag(t *testing.T) {
	f, err := parseFlagsEnv(nil, io.Discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f.ipam.nodeSlice != (clusteripam.SliceDefault{}) {
		t.Errorf("default %+v, want off", f.ipam.nodeSlice)
	}
	if fl := f.flagSet(io.Discard).Lookup("cluster-ipam-node-slice-size"); fl == nil || fl.DefValue != "" {
		t.Fatalf("--cluster-ipam-node-slice-size: %+v, want a flag with an empty default", fl)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want clusteripam.SliceDefault
		str  string
	}{
		{args: []string{"--cluster-ipam-node-slice-size", "/26"}, want: clusteripam.SliceDefault{V4: 26}, str: "/26"},
		{args: []string{"--cluster-ipam-node-slice-size=26"}, want: clusteripam.SliceDefault{V4: 26}, str: "/26"},
		{args: []string{"--cluster-ipam-node-slice-size", "/120"}, want: clusteripam.SliceDefault{V6: 120}, str: "/120"},
		{args: []string{"--cluster-ipam-node-slice-size", "/120, /28"}, want: clusteripam.SliceDefault{V4: 28, V6: 120}, str: "/28,/120"},
		{args: []string{"--cluster-ipam-node-slice-size", "/30,/126"}, want: clusteripam.SliceDefault{V4: 30, V6: 126}, str: "/30,/126"},
		{args: []string{"--cluster-ipam-node-slice-size", ""}, want: clusteripam.SliceDefault{}, str: ""},
		{env: map[string]string{"FLANNELD_CLUSTER_IPAM_NODE_SLICE_SIZE": "/27"}, want: clusteripam.SliceDefault{V4: 27}, str: "/27"},
		{args: []string{"--cluster-ipam-node-slice-size", "/25"}, env: map[string]string{"FLANNELD_CLUSTER_IPAM_NODE_SLICE_SIZE": "/27"}, want: clusteripam.SliceDefault{V4: 25}, str: "/25"},
	} {
		f, err := parseFlagsEnv(tc.args, io.Discard, func(k string) string { return tc.env[k] })
		if err != nil {
			t.Errorf("%q %v: %v", tc.args, tc.env, err)
			continue
		}
		if f.ipam.nodeSlice != tc.want || f.ipam.nodeSlice.String() != tc.str {
			t.Errorf("%q %v: %+v (%q), want %+v (%q)", tc.args, tc.env, f.ipam.nodeSlice, f.ipam.nodeSlice.String(), tc.want, tc.str)
		}
	}
	for _, tc := range []struct{ value, want string }{
		{"/31", "no usable address"},
		{"/32", "no usable address"},
		{"/127", "no usable address"},
		{"/0", "not a prefix length"},
		{"/129", "not a prefix length"},
		{"big", "not a prefix length"},
		{"/26,", "not a prefix length"},
		{"/26,/27", "two sizes of one family"},
		{"/64,/120", "two sizes of one family"},
	} {
		_, err := parseFlagsEnv([]string{"--cluster-ipam-node-slice-size", tc.value}, io.Discard, noEnv)
		if err == nil || !strings.Contains(err.Error(), "cluster-ipam-node-slice-size") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one naming the flag and saying %q", tc.value, err, tc.want)
		}
	}
}
