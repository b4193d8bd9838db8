package cloudipam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/roles/internal/roletest"
)

func testConfig(endpoint string) *config {
	return &config{Provider: ProviderAzure, Endpoint: endpoint, ConnectTimeout: time.Second, ResponseTimeout: 2 * time.Second}
}

// rawServer answers every connection with the bytes of reply (after reading
// the request's first line), or holds it open when reply is nil.
func rawServer(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				c.Read(buf)
				if reply == nil {
					time.Sleep(5 * time.Second)
					return
				}
				c.Write(reply)
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/x"
}

func TestFetch(t *testing.T) {
	big := bytes.Repeat([]byte("a"), MaxAnswer+1)
	handlers := map[string]http.HandlerFunc{
		"/ok": func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Connection") != "close" || r.Method != "GET" {
				w.WriteHeader(400)
			}
			w.Write([]byte("hello"))
		},
		"/chunked": func(w http.ResponseWriter, r *http.Request) {
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		},
		"/big": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			w.Write(big)
		},
		"/bigchunked": func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(big); i += 64 << 10 {
				w.Write(big[i:min(i+64<<10, len(big))])
				w.(http.Flusher).Flush()
			}
		},
		"/exact": func(w http.ResponseWriter, r *http.Request) { w.Write(big[:MaxAnswer]) },
		"/500":   func(w http.ResponseWriter, r *http.Request) { http.Error(w, "agent broke", 500) },
	}
	mux := http.NewServeMux()
	for p, h := range handlers {
		mux.HandleFunc(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(url string) ([]byte, error) {
		return fetch(context.Background(), testConfig(url), "the agent", httpRequest{Method: "GET", URL: url})
	}

	if b, err := get(srv.URL + "/ok"); err != nil || string(b) != "hello" {
		t.Errorf("ok: %q, %v", b, err)
	}
	if b, err := get(srv.URL + "/chunked"); err != nil || string(b) != "part0;part1;part2;" {
		t.Errorf("chunked: %q, %v", b, err)
	}
	if b, err := get(srv.URL + "/exact"); err != nil || len(b) != MaxAnswer {
		t.Errorf("exactly 1 MiB: %d bytes, %v", len(b), err)
	}
	for _, p := range []string{"/big", "/bigchunked"} {
		_, err := get(srv.URL + p)
		roletest.CheckErr(t, err, 6, "the agent gave an answer", "1 MiB")
	}
	closeDelimited := rawServer(t, append([]byte("HTTP/1.0 200 OK\r\n\r\n"), big...))
	_, err := get(closeDelimited)
	roletest.CheckErr(t, err, 6, "1 MiB")

	for name, url := range map[string]string{
		"error status":       srv.URL + "/500",
		"refused":            "http://127.0.0.1:1/x",
		"not HTTP":           rawServer(t, []byte("SSH-2.0-OpenSSH\r\n")),
		"cut off":            rawServer(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")),
		"bad chunk":          rawServer(t, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")),
		"endless headers":    rawServer(t, append([]byte("HTTP/1.1 200 OK\r\n"), bytes.Repeat([]byte("X-A: b\r\n"), 20000)...)),
		"no answer in time":  rawServer(t, nil),
		"unknown encoding":   rawServer(t, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")),
		"negative length":    rawServer(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n")),
		"empty answer":       rawServer(t, []byte{}),
		"status not numeric": rawServer(t, []byte("HTTP/1.1 2x0 OK\r\n\r\n")),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := get(url)
			if err == nil || !isUnreachable(err) {
				t.Errorf("err = %v, want one that lets the cache serve", err)
			}
			if err != nil && !strings.Contains(err.Error(), "cannot get an answer from the agent") {
				t.Errorf("message %q does not name the provider", err)
			}
		})
	}
}

// fakeIMDS is an IMDSv2 with ENIs by MAC.
type fakeIMDS struct {
	token string
	enis  map[string][3]string // mac -> local-ipv4s, subnet-ipv4-cidr-block, device-number
	order []string
	gets  int
}

func (f *fakeIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == imdsTokenPath {
		if r.Method != "PUT" || r.Header.Get(imdsTokenTTL) == "" {
			http.Error(w, "", http.StatusMethodNotAllowed)
			return
		}
		w.Write([]byte(f.token))
		return
	}
	if r.Header.Get(imdsTokenHdr) != f.token {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	f.gets++
	rest, ok := strings.CutPrefix(r.URL.Path, imdsMACsPath)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if rest == "" {
		for _, m := range f.order {
			fmt.Fprintf(w, "%s/\n", m)
		}
		return
	}
	mac, item, _ := strings.Cut(rest, "/")
	e, ok := f.enis[mac]
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch item {
	case "local-ipv4s":
		w.Write([]byte(e[0]))
	case "subnet-ipv4-cidr-block":
		w.Write([]byte(e[1]))
	case "device-number":
		w.Write([]byte(e[2]))
	default:
		http.NotFound(w, r)
	}
}

func TestAWSProvider(t *testing.T) {
	f := &fakeIMDS{token: "tok", enis: map[string][3]string{
		"0e:00:00:00:00:01": {"172.31.5.10\n172.31.5.11\n172.31.5.12", "172.31.0.0/20", "0"},
		"0e:00:00:00:00:02": {"172.31.20.10\n172.31.20.11", "172.31.16.0/20", "1"},
	}, order: []string{"0e:00:00:00:00:01", "0e:00:00:00:00:02"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := testConfig(srv.URL)
	c.Provider = ProviderAWS
	p := newProvider(c)
	// Only the node's NICs are asked about.
	got, err := p.query(context.Background(), func(mac string) bool { return mac == "0e0000000001" })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].MAC != "0e0000000001" || got[0].Subnet.String() != "172.31.0.0/20" ||
		fmt.Sprint(got[0].Primary) != "[172.31.5.10]" || fmt.Sprint(got[0].Secondary) != "[172.31.5.11 172.31.5.12]" {
		t.Errorf("got %+v", got)
	}
	if f.gets != 4 {
		t.Errorf("%d metadata GETs, want 4 (list + 3 items of the one ENI)", f.gets)
	}
	all, err := p.query(context.Background(), nil)
	if err != nil || len(all) != 2 || all[1].Device != 1 {
		t.Errorf("all ENIs: %+v, %v", all, err)
	}

	bad := func(mac string, e [3]string) error {
		f.enis[mac] = e
		defer func() { f.enis[mac] = [3]string{"172.31.5.10\n172.31.5.11\n172.31.5.12", "172.31.0.0/20", "0"} }()
		_, err := p.query(context.Background(), nil)
		return err
	}
	const m1 = "0e:00:00:00:00:01"
	roletest.CheckErr(t, bad(m1, [3]string{"172.31.5.10\nnope", "172.31.0.0/20", "0"}), 6, "AWS IMDS at", `"nope"`)
	roletest.CheckErr(t, bad(m1, [3]string{"", "172.31.0.0/20", "0"}), 6, "lists no address")
	roletest.CheckErr(t, bad(m1, [3]string{"172.31.5.10", "172.31.0.0", "0"}), 6, "subnet-ipv4-cidr-block")
	roletest.CheckErr(t, bad(m1, [3]string{"172.31.5.10", "172.31.0.0/20", "x"}), 6, "device-number")
	roletest.CheckErr(t, bad(m1, [3]string{"172.31.5.10\n172.31.20.11", "172.31.0.0/20", "0"}), 6, "outside its subnet")

	f.order = append(f.order, "zz:00")
	_, err = p.query(context.Background(), nil)
	roletest.CheckErr(t, err, 6, `"zz:00"`, "not a MAC")
	f.order = []string{m1, m1}
	_, err = p.query(context.Background(), nil)
	roletest.CheckErr(t, err, 6, "twice")

	f.token = "" // the token is refused
	c2 := testConfig(srv.URL)
	c2.Provider = ProviderAWS
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "", http.StatusForbidden) })
	_, err = newProvider(c2).query(context.Background(), nil)
	if !isUnreachable(err) || !strings.Contains(err.Error(), "403") {
		t.Errorf("refused token: %v", err)
	}
}

// TestChunkSizeOverflow: a chunk that claims 2^63-1 bytes after a first
// chunk is refused as too large instead of overflowing the size check and
// panicking in make (the plugin printed a stack trace instead of CNI error
// JSON).
func TestChunkSizeOverflow(t *testing.T) {
	url := rawServer(t, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n7fffffffffffffff\r\n"))
	_, err := doHTTP(context.Background(), httpRequest{Method: "GET", URL: url, ConnectTimeout: time.Second,
		ResponseTimeout: 5 * time.Second, MaxBody: MaxAnswer})
	if !errors.Is(err, errTooLarge) {
		t.Fatalf("doHTTP = %v, want errTooLarge", err)
	}
}

// TestPoolFileFIFO: a FIFO (or any file that is not a regular one) named as
// the pool file is refused at once instead of blocking the plugin until
// something writes to it.
func TestPoolFileFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &fileProvider{c: &config{Provider: ProviderFile, Endpoint: path}}
	done := make(chan error, 1)
	go func() {
		_, err := p.query(context.Background(), nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("query of a FIFO = %v, want a refusal naming it not a regular file", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("query of a FIFO pool file still blocked after 30 s")
	}
}
