package kubeapi

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// CRDPoll is how often WaitCRD asks again by default: a CRD installed after
// the agent is seen within 10 s, as the policy watcher's rediscovery and
// MultiNetworkPolicy's wait see theirs (no restart).
const CRDPoll = 10 * time.Second

// CRDWait is what WaitCRD asks for and what it says while it waits.
type CRDWait struct {
	Resource string        // the custom resource's plural, listed on the REST client given
	Poll     time.Duration // how often it asks again (0: CRDPoll)
	Log      *slog.Logger
	// Waiting starts the log line ("egress gateways: not serving them: ");
	// NotServed and Forbidden say why, when the API does not serve the
	// resource and when the agent may not list it.
	Waiting, NotServed, Forbidden string
}

// WaitCRD waits until the API serves w.Resource on c and the agent may
// list it; false when ctx ended first. It says once why it waits, again
// when the reason changes.
func WaitCRD(ctx context.Context, c rest.Interface, w CRDWait) bool {
	if w.Poll <= 0 {
		w.Poll = CRDPoll
	}
	told := ""
	for {
		err := c.Get().Resource(w.Resource).Param("limit", "1").Do(ctx).Error()
		if err == nil {
			return true
		}
		why := w.NotServed
		if apierrors.IsForbidden(err) {
			why = w.Forbidden
		}
		if why != told {
			w.Log.Info(w.Waiting+why+"; asking again every "+w.Poll.String(), "err", err)
			told = why
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(w.Poll):
		}
	}
}
