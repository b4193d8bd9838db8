package unixsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestCall: one line of JSON each way; a request that cannot be encoded is
// ErrEncode and never sent; a server that does not answer is cut when the
// context ends, before its deadline.
func TestCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	// One call at a time: an echo is answered, any other request held
	// unanswered until the test ends.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			if line, err := ReadLine(bufio.NewReader(c), 1<<10); err == nil {
				got <- string(line)
				if string(line) == `{"op":"echo"}` {
					c.Write([]byte(`{"answer":"echo"}` + "\n"))
				}
			}
		}
	}()

	var resp struct{ Answer string }
	if err := Call(context.Background(), path, 1<<10, map[string]string{"op": "echo"}, &resp); err != nil || resp.Answer != "echo" {
		t.Fatalf("Call = %v, answer %q; want echo", err, resp.Answer)
	}
	if line := <-got; line != `{"op":"echo"}` {
		t.Errorf("the server read %q", line)
	}

	bad := struct{ Raw json.RawMessage }{Raw: json.RawMessage("{not json")}
	if err := Call(context.Background(), path, 1<<10, bad, &resp); !errors.Is(err, ErrEncode) {
		t.Errorf("Call with a bad request = %v, want ErrEncode", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	go func() {
		<-got // the silent request is in
		cancel()
	}()
	start := time.Now()
	err = Call(ctx, path, 1<<10, map[string]string{"op": "silent"}, &resp)
	if err == nil || time.Since(start) > 30*time.Second {
		t.Errorf("Call to a silent server = %v after %v; want an error when the context ends", err, time.Since(start))
	}
	select {
	case line := <-got:
		t.Errorf("the bad request reached the server: %q", line)
	default:
	}
}

// TestListenNamed: a socket another process serves is refused with the
// caller's words.
func TestListenNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := ListenNamed(path, NoGroup, "-socketpath", "another daemon answers there")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_, err = ListenNamed(path, NoGroup, "-socketpath", "another daemon answers there")
	if want := "-socketpath " + path + ": another daemon answers there"; err == nil || err.Error() != want {
		t.Errorf("ListenNamed on a served socket = %v, want %q", err, want)
	}
}
