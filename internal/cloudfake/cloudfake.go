// Package cloudfake is a fake cloud metadata service for tests, on loopback
// (httptest): Azure's host agent (NMAgent's getinterfaceinfov1 XML) and
// AWS's IMDSv2 (a session token, then the ENIs by MAC). The cloud-ipam
// role's tests and the end-to-end tests share it. Imported only by tests.
package cloudfake

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Azure is a fake Azure host agent serving one XML body.
type Azure struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body string
	hits atomic.Int32
}

// NewAzure serves body at /machine/plugins?comp=nmagent&type=getinterfaceinfov1
// (anything else is 404) until the test ends.
func NewAzure(t testing.TB, body string) *Azure {
	a := &Azure{body: body}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.hits.Add(1)
		q := r.URL.Query()
		if r.URL.Path != "/machine/plugins" || q.Get("comp") != "nmagent" || q.Get("type") != "getinterfaceinfov1" {
			http.NotFound(w, r)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		w.Write([]byte(a.body))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// URL is the endpoint as cloud-ipam's provider azure takes it.
func (a *Azure) URL() string {
	return a.srv.URL + "/machine/plugins?comp=nmagent&type=getinterfaceinfov1"
}

// Set changes the body served from now on.
func (a *Azure) Set(body string) {
	a.mu.Lock()
	a.body = body
	a.mu.Unlock()
}

// Hits is how many requests the agent has had.
func (a *Azure) Hits() int32 { return a.hits.Load() }

// Close stops the agent (an outage; closing twice is fine).
func (a *Azure) Close() { a.srv.Close() }

// ENI is one network interface IMDS lists: its MAC, its addresses (the
// first is the primary), its subnet and its device number.
type ENI struct {
	MAC    string
	IPs    []string
	Subnet string
	Device int
}

// Token is the session token the fake IMDS hands out and requires.
const Token = "token-1"

// AWS is a fake IMDSv2.
type AWS struct {
	srv    *httptest.Server
	enis   []ENI
	down   atomic.Bool
	tokens atomic.Int32
}

// NewAWS serves enis until the test ends: PUT /latest/api/token (with the
// TTL header) gives Token; every metadata read needs it.
func NewAWS(t testing.TB, enis ...ENI) *AWS {
	a := &AWS{enis: enis}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *AWS) serve(w http.ResponseWriter, r *http.Request) {
	if a.down.Load() {
		http.Error(w, "", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path == "/latest/api/token" {
		if r.Method != "PUT" || r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
			http.Error(w, "", http.StatusMethodNotAllowed)
			return
		}
		a.tokens.Add(1)
		w.Write([]byte(Token))
		return
	}
	if r.Header.Get("X-aws-ec2-metadata-token") != Token {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	const base = "/latest/meta-data/network/interfaces/macs/"
	if r.URL.Path == base {
		for _, e := range a.enis {
			fmt.Fprintf(w, "%s/\n", e.MAC)
		}
		return
	}
	for _, e := range a.enis {
		switch r.URL.Path {
		case base + e.MAC + "/local-ipv4s":
			w.Write([]byte(strings.Join(e.IPs, "\n")))
			return
		case base + e.MAC + "/subnet-ipv4-cidr-block":
			w.Write([]byte(e.Subnet))
			return
		case base + e.MAC + "/device-number":
			fmt.Fprint(w, e.Device)
			return
		}
	}
	http.NotFound(w, r)
}

// URL is the endpoint as cloud-ipam's provider aws takes it.
func (a *AWS) URL() string { return a.srv.URL }

// SetDown makes every request fail with 503 (an outage) or serve again.
func (a *AWS) SetDown(down bool) { a.down.Store(down) }

// Tokens is how many session tokens were handed out.
func (a *AWS) Tokens() int32 { return a.tokens.Load() }
