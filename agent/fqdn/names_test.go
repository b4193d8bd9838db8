package fqdn

import "testing"

func TestParsePattern(t *testing.T) {
	tests := []struct {
		in, want string // want "": refused
	}{
		{"kubernetes.io", "kubernetes.io"},
		{"Blog.Kubernetes.IO", "blog.kubernetes.io"},
		{"kubernetes.io.", "kubernetes.io"},
		{"*.kubernetes.io", "*.kubernetes.io"},
		{"*.Kubernetes.io.", "*.kubernetes.io"},
		{"a_b.example.com", "a_b.example.com"},
		{"x-1.example.com", "x-1.example.com"},
		{"1.2.3.4.example", "1.2.3.4.example"},
		{"localhost", ""},         // one label
		{"*.com", ""},             // a wildcard over one label
		{"*", ""},                 //
		{"", ""},                  //
		{".", ""},                 //
		{"a..b.com", ""},          // empty label
		{".example.com", ""},      //
		{"example.com..", ""},     // two trailing dots
		{"www.*.example.com", ""}, // '*' only as a prefix
		{"*example.com", ""},      // no partial labels
		{"**.example.com", ""},    //
		{"-a.example.com", ""},    // a label begins with a letter or digit
		{"a-.example.com", ""},    // and ends with one
		{"_a.example.com", ""},    //
		{"a b.example.com", ""},   //
		{"ex@mple.com", ""},       //
		{string(make([]byte, 64)) + ".com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParsePattern(tt.in)
			if tt.want == "" {
				if err == nil {
					t.Errorf("ParsePattern(%q) = %v, want an error", tt.in, p)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.in, err)
			}
			if p.String() != tt.want {
				t.Errorf("ParsePattern(%q) = %q, want %q", tt.in, p, tt.want)
			}
		})
	}
	long := "a"
	for len(long) < 260 {
		long += ".abcdefgh"
	}
	if _, err := ParsePattern(long); err == nil {
		t.Errorf("a name of %d characters parsed", len(long))
	}
}

func TestPatternMatches(t *testing.T) {
	tests := []struct {
		pattern string
		name    string
		want    bool
	}{
		// The API's own examples.
		{"kubernetes.io", "kubernetes.io", true},
		{"kubernetes.io", "www.kubernetes.io", false},
		{"kubernetes.io", "blog.kubernetes.io", false},
		{"kubernetes.io", "my-kubernetes.io", false},
		{"kubernetes.io", "wikipedia.org", false},
		{"blog.kubernetes.io", "blog.kubernetes.io", true},
		{"blog.kubernetes.io", "www.kubernetes.io", false},
		{"blog.kubernetes.io", "kubernetes.io", false},
		{"*.kubernetes.io", "www.kubernetes.io", true},
		{"*.kubernetes.io", "blog.kubernetes.io", true},
		{"*.kubernetes.io", "latest.blog.kubernetes.io", true},
		{"*.kubernetes.io", "kubernetes.io", false},
		{"*.kubernetes.io", "wikipedia.org", false},
		// Case, the trailing dot.
		{"kubernetes.io", "KUBERNETES.io.", true},
		{"kubernetes.io.", "kubernetes.io", true},
		{"*.Kubernetes.io", "WWW.kubernetes.IO.", true},
		// Whole labels only.
		{"*.kubernetes.io", "xkubernetes.io", false},
		{"*.kubernetes.io", "www.xkubernetes.io", false},
		{"*.kubernetes.io", ".kubernetes.io", false},
		{"*.kubernetes.io", "a..kubernetes.io", false},
		{"*.kubernetes.io", "kubernetes.io.evil.com", false},
		{"kubernetes.io", "kubernetes.io.evil.com", false},
		{"kubernetes.io", "", false},
		{"*.kubernetes.io", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.name, func(t *testing.T) {
			if got := MustParsePattern(tt.pattern).Matches(tt.name); got != tt.want {
				t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.name, got, tt.want)
			}
		})
	}
}

func TestMatchAny(t *testing.T) {
	ps := []Pattern{MustParsePattern("api.example.com"), MustParsePattern("*.cdn.example.net")}
	tests := []struct {
		names []string
		want  bool
	}{
		{[]string{"api.example.com"}, true},
		{[]string{"alias.example.org", "edge1.cdn.example.net"}, true}, // a CNAME on the chain
		{[]string{"www.example.com", "cdn.example.net"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := MatchAny(ps, tt.names); got != tt.want {
			t.Errorf("MatchAny(%v) = %v, want %v", tt.names, got, tt.want)
		}
	}
	if got := Canonical("WWW.Example.COM."); got != "www.example.com" {
		t.Errorf("Canonical = %q", got)
	}
}
