package unixsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrEncode: Call could not encode the request (nothing was sent).
var ErrEncode = errors.New("encode the request")

// Call is one exchange with a daemon: it sends req as a line of JSON to the
// socket at path and decodes the one line (at most max bytes) that answers
// it into resp. ctx bounds the whole exchange: its deadline, and its end
// cuts the connection. An error encoding req wraps ErrEncode; the others
// are the dial's, or say which step failed (send, read, decode).
func Call(ctx context.Context, path string, max int, req, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEncode, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	line, err := ReadLine(bufio.NewReader(conn), max)
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if err := json.Unmarshal(line, resp); err != nil {
		return fmt.Errorf("decode the answer: %w", err)
	}
	return nil
}
