package kubeapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// TestWaitCRD: WaitCRD asks until the list answers, says why it waits once
// per reason (not served, then forbidden), and gives up when ctx ends.
func TestWaitCRD(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch i := n.Add(1); {
		case i <= 2:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		case i <= 4:
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		default:
			io.WriteString(w, `{"apiVersion":"v1","kind":"NodeList","metadata":{},"items":[]}`)
		}
	}))
	defer srv.Close()
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &Node{}, &NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	w := CRDWait{Resource: "nodes", Poll: time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Waiting: "x: waiting: ", NotServed: "not served", Forbidden: "forbidden"}
	if !WaitCRD(context.Background(), c, w) {
		t.Fatal("WaitCRD = false with a live context")
	}
	if got := strings.Count(logs.String(), "x: waiting: not served"); got != 1 {
		t.Errorf("'not served' said %d times, want once:\n%s", got, logs.String())
	}
	if got := strings.Count(logs.String(), "x: waiting: forbidden"); got != 1 {
		t.Errorf("'forbidden' said %d times, want once:\n%s", got, logs.String())
	}
	n.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if WaitCRD(ctx, c, w) {
		t.Error("WaitCRD = true with an ended context and an API that does not serve the resource")
	}
}

// TestWaitCRDDefaultPoll: without a Poll of its own a wait asks again every
// CRDPoll, 10 s, so a CRD installed after the agent (EgressGateway,
// LoadBalancerIPPool) is seen within 10 s and a list, no restart (the
// controllers asked every 30 s).
func TestWaitCRDDefaultPoll(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	defer srv.Close()
	c, err := kubecore.Client(&rest.Config{Host: srv.URL}, &Node{}, &NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	w := CRDWait{Resource: "nodes", Log: slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		logs.Write(b)
		cancel() // said: enough
		return len(b), nil
	}), nil)), Waiting: "x: waiting: ", NotServed: "not served"}
	if WaitCRD(ctx, c, w) {
		t.Fatal("WaitCRD = true with an API that does not serve the resource")
	}
	if CRDPoll != 10*time.Second || !strings.Contains(logs.String(), "asking again every 10s") {
		t.Errorf("CRDPoll %v; said %q, want 'asking again every 10s'", CRDPoll, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
