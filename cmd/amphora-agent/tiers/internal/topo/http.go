package topo

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server is an HTTP server listening inside a namespace that a test can
// take down (Stop) and bring back on the same address (Start).
type Server struct {
	ns      *Namespace
	addr    string // requested, then the bound address once known
	handler http.Handler

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}

	requests atomic.Int64
}

// ServeHTTP starts an HTTP server on addr (e.g. "198.51.100.2:80", ":80",
// "[2001:db8::2]:8080"; port 0 picks one, kept across Stop/Start) inside the
// namespace. The listening socket is created inside; serving happens on
// ordinary goroutines. The server is closed in t.Cleanup.
func (n *Namespace) ServeHTTP(t testing.TB, addr string, h http.Handler) *Server {
	t.Helper()
	s := &Server{ns: n, addr: addr, handler: h}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// Start (re)binds the server's address and serves. It fails if the server
// is running or the address cannot be bound.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("topo: server %s in %s is already running", s.addr, s.ns.String())
	}
	ln, err := s.ns.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("topo: listen on %s in namespace %s: %w", s.addr, s.ns.String(), err)
	}
	s.addr = ln.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.requests.Add(1)
			s.handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed after Stop
	}()
	s.srv, s.done = srv, done
	return nil
}

// Stop closes the listener and every open connection at once, so new
// connections are refused (like a crashed member). Stopping a stopped
// server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	s.srv, s.done = nil, nil
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Running reports whether the server is serving.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Addr is the bound address (host:port).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Requests counts the requests served so far, across restarts.
func (s *Server) Requests() int64 { return s.requests.Load() }

// MemberHandler answers every request with the body name (e.g. "member-1",
// no newline), headers X-Member: name and Content-Type: text/plain, and
// copies the request's X-Gen header values into the response unchanged, so a
// test can tag a request and check which member served it and that the
// proxy passed the header through. The request body is read and discarded.
func MemberHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if g, ok := r.Header["X-Gen"]; ok {
			w.Header()["X-Gen"] = append([]string(nil), g...)
		}
		w.Header().Set("X-Member", name)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, name)
	})
}

// HTTPClient returns a client whose connections are dialled from inside the
// namespace. keepAlive=false opens a new connection per request. It ignores
// proxy environment variables, does not follow redirects (the test sees the
// 3xx itself), uses HTTP/1.1, and times out: 5 s to connect, 10 s for
// response headers, 15 s per request. Its idle connections are closed when
// the namespace is deleted. For TLS set Transport.(*http.Transport).TLSClientConfig.
func (n *Namespace) HTTPClient(keepAlive bool) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           n.DialContext,
		DisableKeepAlives:     !keepAlive,
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	n.onDestroy(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		Timeout:   15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
