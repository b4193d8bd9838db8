package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cnibox/cnibox/internal/unixsock"
)

// DefaultTimeout bounds one call when the context has no earlier deadline.
const DefaultTimeout = 10 * time.Second

// Client calls the agent's pod API. The zero value uses DefaultSocket.
type Client struct {
	Socket  string
	Timeout time.Duration // 0 = DefaultTimeout
}

func (c *Client) socket() string {
	if c.Socket == "" {
		return DefaultSocket
	}
	return c.Socket
}

// Do sends one request and reads the answer. A failure to reach the agent
// is an *UnreachableError; a failure the agent reports is an *Error.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var resp Response
	err := unixsock.Call(ctx, c.socket(), MaxMessage, req, &resp)
	switch {
	case errors.Is(err, unixsock.ErrEncode):
		return nil, err
	case err != nil:
		return nil, &UnreachableError{Socket: c.socket(), Err: err}
	}
	if resp.Error != "" {
		return nil, &Error{Reason: resp.Reason, Msg: resp.Error}
	}
	return &resp, nil
}

// ReadLine reads one line of at most MaxMessage bytes, without the newline.
func ReadLine(r *bufio.Reader) ([]byte, error) { return unixsock.ReadLine(r, MaxMessage) }

// Pod returns the pod's metadata; uid, when not empty, must match.
func (c *Client) Pod(ctx context.Context, namespace, name, uid string) (*Pod, error) {
	return answer(ctx, c, Request{Op: OpPod, Namespace: namespace, Name: name, UID: uid}, "pod",
		func(r *Response) *Pod { return r.Pod })
}

// NetAttachDef returns the NetworkAttachmentDefinition namespace/name for a
// pod of podNamespace (the agent honours NADs only from the pod's namespace
// and "default" unless its namespace isolation is off).
func (c *Client) NetAttachDef(ctx context.Context, podNamespace, namespace, name string) (*NetAttachDef, error) {
	return answer(ctx, c, Request{Op: OpNetAttachDef, Namespace: namespace, Name: name, PodNamespace: podNamespace}, "network attachment definition",
		func(r *Response) *NetAttachDef { return r.NetAttachDef })
}

// NetAttachDefArgs is NetAttachDef for a selection with cni-args (nil:
// none), which the agent checks merged into the NAD's config.
func (c *Client) NetAttachDefArgs(ctx context.Context, podNamespace, namespace, name string, cniArgs map[string]any) (*NetAttachDef, error) {
	req := Request{Op: OpNetAttachDef, Namespace: namespace, Name: name, PodNamespace: podNamespace}
	if len(cniArgs) > 0 {
		b, err := json.Marshal(cniArgs)
		if err != nil {
			return nil, fmt.Errorf("cni-args: %w", err)
		}
		req.CNIArgs = b
	}
	return answer(ctx, c, req, "network attachment definition", func(r *Response) *NetAttachDef { return r.NetAttachDef })
}

// answer sends req and returns the part of the response that part picks; an
// answer without it (what names it) is an *UnreachableError.
func answer[T any](ctx context.Context, c *Client, req Request, what string, part func(*Response) *T) (*T, error) {
	resp, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if v := part(resp); v != nil {
		return v, nil
	}
	return nil, &UnreachableError{Socket: c.socket(), Err: errors.New("the answer has no " + what)}
}

// SetNetworkStatus writes status (a JSON list; nil removes the annotation)
// into the pod's NetworkStatusAnnotation.
func (c *Client) SetNetworkStatus(ctx context.Context, namespace, name, uid string, status json.RawMessage) error {
	_, err := c.Do(ctx, Request{Op: OpSetNetworkStatus, Namespace: namespace, Name: name, UID: uid, NetworkStatus: status})
	return err
}
