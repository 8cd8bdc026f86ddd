package gate

import (
	"bytes"
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/acceptretry"
)

// Options tune the gate.
type Options struct {
	TLS *tls.Config
	// HandshakeTimeout bounds one TLS handshake.
	HandshakeTimeout time.Duration
	// MaxPending bounds handshakes in progress; the oldest beyond it is
	// closed.
	MaxPending int
	// LogEvery is the shortest time between two lines about failed
	// handshakes; those held back are counted in the next line.
	LogEvery time.Duration
	// ErrorBody renders the body of an error answer net/http writes
	// itself (bad request line, oversized headers) before any handler
	// runs; nil leaves those answers as they are.
	ErrorBody func(code int, reason, description string) []byte
	Log       *zap.Logger
}

// Listener is a net.Listener whose Accept returns authenticated TLS
// connections.
type Listener struct {
	ln    net.Listener
	opts  Options
	ready chan net.Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending *list.List // of net.Conn, oldest first
	closed  bool

	logMu      sync.Mutex
	lastLog    time.Time
	suppressed int
}

// New starts accepting on ln.
func New(ln net.Listener, opts Options) *Listener {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 128
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	// Out of file descriptors and the like: the accept is tried again
	// after a wait instead of spinning or giving up.
	retrying := acceptretry.Wrap(ln, func(err error, wait time.Duration) {
		opts.Log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", wait))
	})
	l := &Listener{ln: retrying, opts: opts, ready: make(chan net.Conn), done: make(chan struct{}), pending: list.New()}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose handshake succeeded.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection still in its
// handshake. Connections already handed out belong to their owner.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.mu.Lock()
		l.closed = true
		for e := l.pending.Front(); e != nil; e = e.Next() {
			e.Value.(net.Conn).Close()
		}
		l.mu.Unlock()
	})
	return err
}

// Wait returns once the accept loop has ended (after Close).
func (l *Listener) Wait() { l.wg.Wait() }

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		// Only a closed listener ends it (see acceptretry).
		raw, err := l.ln.Accept()
		if err != nil {
			return
		}
		elem, ok := l.admit(raw)
		if !ok {
			raw.Close()
			return
		}
		go l.handshake(raw, elem)
	}
}

// admit records raw as pending and closes the oldest pending connection
// beyond the bound. The closed one's handshake fails and it is dropped.
func (l *Listener) admit(raw net.Conn) (*list.Element, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false
	}
	elem := l.pending.PushBack(raw)
	for l.pending.Len() > l.opts.MaxPending {
		oldest := l.pending.Front()
		l.pending.Remove(oldest)
		oldest.Value.(net.Conn).Close()
		// Marks it evicted for settle.
		oldest.Value = nil
	}
	return elem, true
}

// settle removes a finished handshake from the pending list; false means it
// was evicted meanwhile (or the listener closed).
func (l *Listener) settle(elem *list.Element) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || elem.Value == nil {
		return false
	}
	l.pending.Remove(elem)
	return true
}

func (l *Listener) handshake(raw net.Conn, elem *list.Element) {
	tc := tls.Server(raw, l.opts.TLS)
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if !l.settle(elem) {
		// Evicted or shutting down: the socket is closed already.
		tc.Close()
		return
	}
	if err != nil {
		l.logFailure(raw.RemoteAddr(), err)
		tc.Close()
		return
	}
	c := &Conn{Conn: tc, errorBody: l.opts.ErrorBody}
	select {
	case l.ready <- c:
	case <-l.done:
		tc.Close()
	}
}

// logFailure logs a failed handshake, at most one line per LogEvery; the
// next line says how many were held back, so a flood cannot fill the disk.
func (l *Listener) logFailure(remote net.Addr, err error) {
	l.logMu.Lock()
	now := time.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < l.opts.LogEvery {
		l.suppressed++
		l.logMu.Unlock()
		return
	}
	n := l.suppressed
	l.lastLog, l.suppressed = now, 0
	l.logMu.Unlock()
	l.opts.Log.Info("TLS handshake failed", zap.Stringer("remote", remote), zap.Error(err),
		zap.Int("suppressed_since_last", n))
}

// Conn is an authenticated connection. It is not a *tls.Conn, so net/http
// treats it as ready to read requests from.
type Conn struct {
	*tls.Conn
	errorBody func(code int, reason, description string) []byte
}

// The exact framing net/http uses for the answers it writes on its own
// when a request cannot be read (bad request line, headers too large,
// unsupported transfer encoding or HTTP version): one write, then the
// connection closes. agent/api's TestGateRewritesNetHTTPAnswers checks
// them against the net/http this is built with.
var (
	goErrorPrefix  = []byte("HTTP/1.1 ")
	goErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")
)

// Write passes data through, except net/http's own plain-text error
// answers, which are re-rendered with ErrorBody.
func (c *Conn) Write(b []byte) (int, error) {
	if c.errorBody != nil {
		if out, ok := c.rewrite(b); ok {
			if _, err := c.Conn.Write(out); err != nil {
				return 0, err
			}
			return len(b), nil
		}
	}
	return c.Conn.Write(b)
}

// goExpectationFailed starts net/http's answer to an Expect header other
// than 100-continue, sent before any handler: headers only, no body.
var goExpectationFailed = []byte("HTTP/1.1 417 Expectation Failed\r\n")

// rewrite recognises a whole net/http error answer: status line, the fixed
// headers, and a body that repeats the status line (or, for 501, names
// the transfer encoding); or its bodiless 417. Handler answers never have
// these forms: they carry a Content-Length and never this exact header
// block, and the agent never answers 417.
func (c *Conn) rewrite(b []byte) ([]byte, bool) {
	if bytes.HasPrefix(b, goExpectationFailed) && bytes.HasSuffix(b, []byte("\r\n\r\n")) &&
		bytes.Contains(b, []byte("\r\nContent-Length: 0\r\n")) && bytes.Count(b, []byte("\r\n\r\n")) == 1 {
		return c.answer(417, []byte("Expectation Failed"), ""), true
	}
	if !bytes.HasPrefix(b, goErrorPrefix) {
		return nil, false
	}
	status, body, ok := bytes.Cut(b[len(goErrorPrefix):], goErrorHeaders)
	if !ok || bytes.ContainsAny(status, "\r\n") || len(status) < 5 || status[3] != ' ' {
		return nil, false
	}
	if !bytes.Equal(body, status) && !bytes.Equal(body, []byte("Unsupported transfer encoding")) {
		return nil, false
	}
	code := 0
	for _, d := range status[:3] {
		if d < '0' || d > '9' {
			return nil, false
		}
		code = code*10 + int(d-'0')
	}
	reason, description, _ := bytes.Cut(status[4:], []byte(": "))
	if !bytes.Equal(body, status) {
		description = body
	}
	return c.answer(code, reason, string(description)), true
}

// answer renders the JSON answer that replaces net/http's; the connection
// closes after it, as after net/http's.
func (c *Conn) answer(code int, reason []byte, description string) []byte {
	payload := c.errorBody(code, string(reason), description)
	var out bytes.Buffer
	out.Write(goErrorPrefix)
	out.WriteString(strconv.Itoa(code) + " ")
	out.Write(reason)
	out.WriteString("\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ")
	out.WriteString(strconv.Itoa(len(payload)))
	out.WriteString("\r\n\r\n")
	out.Write(payload)
	return out.Bytes()
}
