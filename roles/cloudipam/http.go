package cloudipam

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// cnibox talks to the host agent and IMDS with this small HTTP/1.1 client
// instead of net/http: linking net/http (and crypto/tls with it) doubles the
// binary and adds ~0.7 ms to every exec of every role, measured, while the
// providers only need a plain GET or PUT on a local address.

// httpRequest is one request to a plain http:// URL.
type httpRequest struct {
	Method          string // "GET" or "PUT"
	URL             string
	Header          [][2]string
	ConnectTimeout  time.Duration
	ResponseTimeout time.Duration // from the connection to the end of the body
	MaxBody         int64
}

type httpResponse struct {
	Status int
	Body   []byte
}

// errTooLarge: the answer's body is larger than MaxBody.
var errTooLarge = errors.New("answer too large")

// maxHeaderBytes bounds the status line and headers.
const maxHeaderBytes = 64 << 10

// doHTTP sends req on a new connection (Connection: close) and reads the
// whole answer. Errors of the connection or of HTTP framing are returned as
// they are; a body past MaxBody wraps errTooLarge.
func doHTTP(ctx context.Context, req httpRequest) (*httpResponse, error) {
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%s: only http:// URLs are supported", req.URL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := net.Dialer{Timeout: req.ConnectTimeout}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if req.ResponseTimeout > 0 {
		conn.SetDeadline(time.Now().Add(req.ResponseTimeout))
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cnibox\r\nAccept: */*\r\nConnection: close\r\n", req.Method, u.RequestURI(), u.Host)
	for _, h := range req.Header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	if req.Method != "GET" {
		b.WriteString("Content-Length: 0\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}

	return readResponse(conn, req.MaxBody, req.Method)
}

// readResponse reads an answer from r: status lines (1xx ones are skipped),
// headers within maxHeaderBytes, and a body of at most maxBody bytes.
func readResponse(r io.Reader, maxBody int64, method string) (*httpResponse, error) {
	limited := &io.LimitedReader{R: r, N: maxHeaderBytes}
	br := bufio.NewReader(limited)
	tp := textproto.NewReader(br)
	var status int
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("read the status line: %w", eofErr(err))
		}
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
			return nil, fmt.Errorf("not an HTTP answer: %q", clip(line))
		}
		if status, err = strconv.Atoi(code); err != nil || status < 100 {
			return nil, fmt.Errorf("not an HTTP status: %q", clip(line))
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil, fmt.Errorf("read the headers: %w", eofErr(err))
		}
		if status >= 200 {
			// The body may be longer than the header budget: lift the limit.
			limited.N = maxBody + 1<<16
			return readBody(br, hdr, maxBody, status, method)
		}
		_ = hdr // 1xx: another status line follows
	}
}

// readBody reads the body the headers announce: chunked, sized, or up to the
// end of the connection.
func readBody(br *bufio.Reader, hdr textproto.MIMEHeader, max int64, status int, method string) (*httpResponse, error) {
	resp := &httpResponse{Status: status}
	if status == 204 || status == 304 {
		return resp, nil
	}
	var err error
	switch te := strings.ToLower(hdr.Get("Transfer-Encoding")); {
	case te == "chunked":
		resp.Body, err = readChunked(br, max)
	case te != "" && te != "identity":
		return nil, fmt.Errorf("unsupported Transfer-Encoding %q", te)
	case hdr.Get("Content-Length") != "":
		n, perr := strconv.ParseInt(strings.TrimSpace(hdr.Get("Content-Length")), 10, 64)
		if perr != nil || n < 0 {
			return nil, fmt.Errorf("bad Content-Length %q", clip(hdr.Get("Content-Length")))
		}
		if n > max {
			return nil, fmt.Errorf("%w: Content-Length %d is past the limit of %d bytes", errTooLarge, n, max)
		}
		resp.Body = make([]byte, n)
		if _, err = io.ReadFull(br, resp.Body); err != nil {
			err = fmt.Errorf("read the body: %w", eofErr(err))
		}
	default:
		resp.Body, err = io.ReadAll(io.LimitReader(br, max+1))
		if err == nil && int64(len(resp.Body)) > max {
			err = fmt.Errorf("%w: more than %d bytes", errTooLarge, max)
		}
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// readChunked decodes a chunked body of at most max bytes.
func readChunked(br *bufio.Reader, max int64) ([]byte, error) {
	tp := textproto.NewReader(br)
	var body []byte
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("read a chunk size: %w", eofErr(err))
		}
		sizeHex, _, _ := strings.Cut(line, ";")
		size, err := strconv.ParseInt(strings.TrimSpace(sizeHex), 16, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad chunk size %q", clip(line))
		}
		if size == 0 {
			// Trailers end with an empty line.
			if _, err := tp.ReadMIMEHeader(); err != nil {
				return nil, fmt.Errorf("read the trailer: %w", eofErr(err))
			}
			return body, nil
		}
		if size > max-int64(len(body)) { // int64(len(body))+size could overflow
			return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, max)
		}
		start := len(body)
		body = append(body, make([]byte, size)...)
		if _, err := io.ReadFull(br, body[start:]); err != nil {
			return nil, fmt.Errorf("read a chunk: %w", eofErr(err))
		}
		if crlf, err := tp.ReadLine(); err != nil || crlf != "" {
			return nil, fmt.Errorf("chunk not followed by CRLF")
		}
	}
}

// eofErr names a cut-off answer.
func eofErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the answer ends early (%w)", io.ErrUnexpectedEOF)
	}
	return err
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
