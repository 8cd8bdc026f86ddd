// Package metricstest stands in for HAProxy's Prometheus exporter in the
// metrics endpoint's tests and the system tier's scrape floods.
package metricstest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// ServeExporter stands in for HAProxy's exporter on ln: answer runs on
// each connection once its request's head is read, and the connection
// closes after it. ln and every connection still open close when the
// test ends.
func ServeExporter(t testing.TB, ln net.Listener, answer func(c net.Conn)) {
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]bool{}
		closed bool
		wg     sync.WaitGroup
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = true
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				answer(c)
			}()
		}
	}()
}

// StreamLetter writes n bytes of the letter b to w until w fails or
// abort (nil: never) closes, and reports how many went.
func StreamLetter(w io.Writer, b byte, n int64, abort <-chan struct{}) int64 {
	chunk := bytes.Repeat([]byte{b}, 64<<10)
	sent := int64(0)
	for sent < n {
		select {
		case <-abort:
			return sent
		default:
		}
		k, err := w.Write(chunk[:min(int64(len(chunk)), n-sent)])
		sent += int64(k)
		if err != nil {
			break
		}
	}
	return sent
}
