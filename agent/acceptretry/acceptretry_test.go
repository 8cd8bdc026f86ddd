package acceptretry

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/acceptretry/acceptretrytest"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Accepts that fail with EMFILE are retried after 5, 10, 20 ms ... up to
// 1 s, and the connection that comes once they succeed is returned.
func TestFailedAcceptsAreRetriedWithBackoff(t *testing.T) {
	failing := acceptretrytest.FailFirst(listen(t), 9)
	var mu sync.Mutex
	var waits []time.Duration
	l := Wrap(failing, func(err error, wait time.Duration) {
		if !errors.Is(err, acceptretrytest.EMFILE.Err) {
			t.Errorf("retrying told of %v", err)
		}
		mu.Lock()
		waits = append(waits, wait)
		mu.Unlock()
	})
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conn, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after 9 failures: %v", err)
	}
	conn.Close()
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v ms", waits, want)
	}
	for i := range want {
		if waits[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", waits, want)
		}
	}
}

// Closing the listener ends Accept at once, also in a wait between tries.
func TestCloseEndsAccept(t *testing.T) {
	failing := acceptretrytest.FailFirst(listen(t), 1000)
	l := Wrap(failing, nil)
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		done <- err
	}()
	// After the ninth failure Accept waits 1 s; Close must not wait for
	// that to end.
	deadline := time.Now().Add(10 * time.Second)
	for failing.Failed() < 9 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d accepts tried in 10 s", failing.Failed())
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Accept returned %v after Close", d)
	}
}

// A listener closed under it ends Accept without a retry.
func TestClosedListenerIsNotRetried(t *testing.T) {
	ln := listen(t)
	retried := 0
	l := Wrap(ln, func(error, time.Duration) { retried++ })
	ln.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) || retried != 0 {
		t.Fatalf("Accept on a closed listener: %v after %d retries", err, retried)
	}
}
