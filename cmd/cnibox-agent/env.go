package main

import (
	"fmt"
	"strconv"
)

// flannelEnv is what flanneld reads from its environment besides
// FLANNELD_<FLAG>: the node name (NODE_NAME, else the pod's spec.nodeName
// through POD_NAME/POD_NAMESPACE, which kube-flannel.yml sets from the
// downward API) and two knobs of its kube subnet manager.
type flannelEnv struct {
	nodeName     string // NODE_NAME
	podName      string // POD_NAME
	podNamespace string // POD_NAMESPACE
	// eventQueueDepth is EVENT_QUEUE_DEPTH: the length of flanneld's
	// buffer of node events (default 5000). cnibox-agent's queue merges
	// updates and has no bound, so it is checked and logged only.
	eventQueueDepth int
	// contWhenCacheNotReady is CONT_WHEN_CACHE_NOT_READY=true: flanneld
	// starts even when its node informer has not synced within 10 minutes.
	// cnibox-agent never waits for the informer before it starts (its
	// lease comes from a GET of its own Node), so it always goes on.
	contWhenCacheNotReady bool
}

// defaultEventQueueDepth is flanneld's.
const defaultEventQueueDepth = 5000

// readFlannelEnv reads flanneld's variables; an EVENT_QUEUE_DEPTH that is
// not an integer is an error, as in flanneld.
func readFlannelEnv(getenv func(string) string) (flannelEnv, error) {
	e := flannelEnv{
		nodeName:              getenv("NODE_NAME"),
		podName:               getenv("POD_NAME"),
		podNamespace:          getenv("POD_NAMESPACE"),
		eventQueueDepth:       defaultEventQueueDepth,
		contWhenCacheNotReady: getenv("CONT_WHEN_CACHE_NOT_READY") == "true",
	}
	if s := getenv("EVENT_QUEUE_DEPTH"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return flannelEnv{}, fmt.Errorf("$EVENT_QUEUE_DEPTH=%q is not an integer: set a number of events (flanneld's default is 5000) or unset it", s)
		}
		if n > 0 {
			e.eventQueueDepth = n
		}
	}
	return e, nil
}

// podRef reports the pod POD_NAMESPACE/POD_NAME names, when both are set.
func (e flannelEnv) podRef() (namespace, name string, ok bool) {
	return e.podNamespace, e.podName, e.podName != "" && e.podNamespace != ""
}
