package podapi

import (
	"context"
	"fmt"

	"github.com/cnibox/cnibox/internal/agentapi"
)

// DeviceSource answers OpPodDevices: the devices the kubelet allocated to a
// pod, by resource name (the kubelet's pod-resources API).
type DeviceSource interface {
	PodDevices(ctx context.Context, namespace, name, uid string) (map[string][]string, error)
}

// EventSink records events on a pod (OpEvents).
type EventSink interface {
	Events(ctx context.Context, namespace, name, uid string, events []agentapi.Event) error
}

// maxEvents bounds one OpEvents request (one event per network).
const maxEvents = 64

// handleMultus answers OpPodDevices and OpEvents when src can.
func handleMultus(ctx context.Context, src Source, req agentapi.Request) (map[string][]string, error) {
	switch req.Op {
	case agentapi.OpPodDevices:
		ds, ok := src.(DeviceSource)
		if !ok {
			return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: "this agent does not read the kubelet's pod-resources API"}
		}
		if _, err := src.Pod(ctx, req.Namespace, req.Name, req.UID); err != nil {
			return nil, err // not this node's pod, or none
		}
		return ds.PodDevices(ctx, req.Namespace, req.Name, req.UID)
	default:
		es, ok := src.(EventSink)
		if !ok {
			return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: "this agent does not record events"}
		}
		if len(req.Events) > maxEvents {
			return nil, &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("%d events: at most %d per request", len(req.Events), maxEvents)}
		}
		for _, e := range req.Events {
			if (e.Type != "Normal" && e.Type != "Warning") || e.Reason == "" || len(e.Message) > 1024 {
				return nil, &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("event %+v: want type Normal or Warning, a reason, and a message of at most 1024 bytes", e)}
			}
		}
		return nil, es.Events(ctx, req.Namespace, req.Name, req.UID, req.Events)
	}
}
