// Package kubecoretest is what tests of the agent's Kubernetes clients
// share: an API server that accepts every request and never answers, and
// the check that a call against it gives up. It is imported only by tests.
package kubecoretest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// Silent is the client configuration of an API server that accepts every
// request and never answers (a connection gone silent), until the test
// ends.
func Silent(t testing.TB) *rest.Config {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return &rest.Config{Host: srv.URL}
}

// GivesUp runs call, which talks to a Silent server, and fails the test
// unless it returns an error before wait has passed (a deadline far longer
// than the call's own: a call with none never returns).
func GivesUp(t testing.TB, what string, wait time.Duration, call func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s against an API server that never answers: no error", what)
		}
	case <-time.After(wait):
		t.Fatalf("%s against an API server that never answers: still waiting after %s", what, wait)
	}
}
