package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/metrics/promex"
	"github.com/amphora-agent/amphora-agent/agent/sysinfo"
	"github.com/amphora-agent/amphora-agent/agent/tick"
	"github.com/amphora-agent/amphora-agent/netns"
)

const (
	// metricsWatchInterval: how often the namespace is looked at (created
	// late by the first plug, or recreated); upstream retries every second.
	metricsWatchInterval = time.Second
	// metricsFetchTimeout bounds one scrape's read of HAProxy's page. A
	// tenant's scrape through the PROMETHEUS listener is cut by HAProxy
	// after 5 s anyway (the template's timeout server); a direct scrape
	// of a very large page may take longer.
	metricsFetchTimeout = 30 * time.Second
	// exporterAnswerTimeout bounds the connect and the head of HAProxy's
	// answer: HAProxy cuts the tenant's scrape at 5 s (timeout server),
	// so a silent exporter is answered 502 by then instead of holding a
	// scrape's slot for metricsFetchTimeout.
	exporterAnswerTimeout = 5 * time.Second
	// maxExporterHead caps the head of HAProxy's answer (its status line
	// and three short headers, 113 bytes from HAProxy 2.6): a head
	// without end is 502, not memory.
	maxExporterHead = 64 << 10
	// MaxScrapes is how many scrapes read HAProxy's page at once; a
	// Prometheus server scrapes once per interval, so a handful is
	// plenty, and each costs a connection and ~200 KB of buffers.
	MaxScrapes = 8
	// scrapeQueueWait is how long a scrape beyond MaxScrapes waits for a
	// slot before it is answered 503.
	scrapeQueueWait = time.Second
	// MaxConns caps the connections the endpoint holds; clients
	// beyond wait in the kernel's accept queue, costing the agent no
	// descriptor or memory.
	MaxConns = 512
	// readHeaderTimeout and maxHeaderBytes are the agent API's limits.
	readHeaderTimeout = 10 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Server listens inside the namespace and translates HAProxy's
// page for each scrape.
type Server struct {
	namespace string
	listen    string // host:port inside the namespace
	exporter  string // HAProxy's exporter, host:port inside the namespace
	log       *zap.Logger
	// utilization gives the CPU and memory gauges (sysinfo by default).
	utilization func() (cpu, mem float64, err error)
	// Extra, when set, gives each scrape's other sources of series (the
	// UDP and SCTP listeners' IPVS counters, read once per scrape).
	Extra func(ctx context.Context) []promex.Source
	// watched, when set, hears after each look at the namespace whether
	// the endpoint is open (tests).
	watched func(open bool)

	// Scraped, when set, hears of each answer (the memory trimmer).
	Scraped func()

	// dial opens a connection to the exporter: through the namespace's
	// dialer by default.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// inside is the dialer of the namespace the endpoint listens in; nil
	// while it does not.
	inside atomic.Pointer[netns.Dialer]
	// answerTimeout is exporterAnswerTimeout (shorter in tests).
	answerTimeout time.Duration
	// slots holds a token per scrape in flight, at most MaxScrapes.
	slots       chan struct{}
	translators sync.Pool
}

func NewServer(namespace, listen, exporter string, log *zap.Logger) *Server {
	m := &Server{namespace: namespace, listen: listen, exporter: exporter, log: log,
		utilization: sysinfo.Reader{}.Utilization, answerTimeout: exporterAnswerTimeout,
		slots: make(chan struct{}, MaxScrapes)}
	m.dial = m.dialInside
	m.translators.New = func() any { return new(promex.Translator) }
	return m
}

// dialInside connects from the namespace the endpoint listens in, where
// HAProxy's exporter listens on the loopback.
func (m *Server) dialInside(ctx context.Context, network, addr string) (net.Conn, error) {
	d := m.inside.Load()
	if d == nil {
		return nil, fmt.Errorf("network namespace %s not open", m.namespace)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	return d.DialTCP(ctx, ap)
}

// Run serves until ctx ends: it listens inside the namespace once it
// exists and listens again when the name comes to mean a new namespace.
func (m *Server) Run(ctx context.Context) error {
	var (
		srv     *http.Server
		served  uint64 // the namespace srv listens in
		lastErr string
	)
	stop := func() {
		if srv != nil {
			srv.Close()
			srv = nil
		}
		if d := m.inside.Swap(nil); d != nil {
			d.Close()
		}
	}
	defer stop()
	// On the agent's shared instants, with its other periodic work.
	watch := tick.NewTicker(metricsWatchInterval)
	defer watch.Stop()
	for {
		id, err := netns.ID(m.namespace)
		switch {
		case err != nil:
			if srv != nil {
				m.log.Info("network namespace gone; metrics endpoint closed", zap.String("namespace", m.namespace))
			}
			stop()
		case srv == nil || id != served:
			stop()
			ln, err := netns.Listen(m.namespace, "tcp", m.listen)
			if err != nil {
				// Logged once per distinct failure, retried every tick.
				if msg := err.Error(); msg != lastErr {
					m.log.Warn("cannot open the metrics endpoint; retrying", zap.String("namespace", m.namespace),
						zap.String("address", m.listen), zap.Error(err))
					lastErr = msg
				}
				break
			}
			// One thread in the namespace makes every scrape's socket.
			d, err := netns.NewDialer(m.namespace)
			if err != nil {
				ln.Close()
				if msg := err.Error(); msg != lastErr {
					m.log.Warn("cannot connect from the namespace; retrying", zap.String("namespace", m.namespace), zap.Error(err))
					lastErr = msg
				}
				break
			}
			m.inside.Store(d)
			lastErr = ""
			srv = &http.Server{
				Handler:           m,
				ReadHeaderTimeout: readHeaderTimeout,
				WriteTimeout:      metricsFetchTimeout,
				MaxHeaderBytes:    maxHeaderBytes,
				ErrorLog:          zap.NewStdLog(m.log),
			}
			served = id
			go srv.Serve(capConns(ln, MaxConns))
			m.log.Info("serving Octavia metrics", zap.String("namespace", m.namespace),
				zap.String("address", m.listen), zap.String("exporter", m.exporter))
		}
		if m.watched != nil {
			m.watched(srv != nil)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-watch.C:
			watch.Next()
		}
	}
}

// ServeHTTP answers any path, as upstream does: 200 with the page, 502
// when HAProxy's exporter cannot be read, 503 when too many scrapes are
// in flight.
func (m *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.Scraped != nil {
		// Every answer, 503s too: a flood's garbage is handed back
		// once the last of it is answered.
		defer m.Scraped()
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNotImplemented)
		return
	}
	if !m.takeSlot(r.Context()) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer m.releaseSlot()
	ctx, cancel := context.WithTimeout(r.Context(), metricsFetchTimeout)
	defer cancel()
	cpu, mem, err := m.utilization()
	if err != nil {
		m.log.Error("metrics: reading CPU and memory use", zap.Error(err))
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	resp, err := m.fetch(ctx)
	if err != nil {
		m.log.Warn("metrics: HAProxy's exporter cannot be read", zap.Error(err))
		badGateway(w)
		return
	}
	defer resp.Body.Close()

	page := &pageWriter{w: w}
	if r.Method == http.MethodHead {
		page.commit()
		return
	}
	// The status goes out with the first bytes of the page, so a page
	// that fails before (a line over the cap, say) is still a 502.
	out := bufio.NewWriterSize(page, 32<<10)
	tr := m.translators.Get().(*promex.Translator)
	defer m.translators.Put(tr)
	tr.Sources = nil
	if m.Extra != nil {
		tr.Sources = m.Extra(ctx)
	}
	err = promex.WriteUtilization(out, cpu, mem)
	if err == nil {
		err = tr.Translate(out, resp.Body)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		if !page.started {
			m.log.Warn("metrics: HAProxy's page cannot be read", zap.Error(err))
			badGateway(w)
			return
		}
		// The status is sent: end the response unfinished (no last
		// chunk), so the scraper sees a failure, not a short page.
		m.log.Warn("metrics: scrape cut short", zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// takeSlot waits up to scrapeQueueWait for one of the MaxScrapes slots.
func (m *Server) takeSlot(ctx context.Context) bool {
	select {
	case m.slots <- struct{}{}:
		return true
	default:
	}
	wait := time.NewTimer(scrapeQueueWait)
	defer wait.Stop()
	select {
	case m.slots <- struct{}{}:
		return true
	case <-wait.C:
	case <-ctx.Done():
	}
	return false
}

func (m *Server) releaseSlot() { <-m.slots }

// badGateway is the answer when HAProxy's page cannot be had.
func badGateway(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusBadGateway)
}

// pageWriter sends the 200 and its headers with the first bytes written.
type pageWriter struct {
	w       http.ResponseWriter
	started bool
}

func (p *pageWriter) commit() {
	p.started = true
	h := p.w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/plain; version=0.0.4")
	h.Set("Connection", "close")
	p.w.WriteHeader(http.StatusOK)
}

func (p *pageWriter) Write(b []byte) (int, error) {
	if !p.started {
		p.commit()
	}
	return p.w.Write(b)
}

// fetch opens HAProxy's page; anything but a 200 is an error. It is one
// HTTP/1.1 GET on a fresh connection, closed with the body, as upstream
// fetches it (nothing is kept across a namespace that may be recreated).
// The connect and the answer's head must come within answerTimeout; the
// body is bounded by ctx. net/http's client is not used: its transport
// (proxies, HTTP/2, pools, cookies) would add about half a megabyte to
// the agent's resident size for a request to a fixed loopback address.
func (m *Server) fetch(ctx context.Context) (*http.Response, error) {
	headCtx, cancel := context.WithTimeout(ctx, m.answerTimeout)
	defer cancel()
	// explain says why a failed exchange failed when a deadline cut it.
	explain := func(err error) error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case headCtx.Err() != nil:
			return fmt.Errorf("%w (no answer within %v)", err, m.answerTimeout)
		}
		return err
	}
	conn, err := m.dial(headCtx, "tcp", m.exporter)
	if err != nil {
		return nil, explain(err)
	}
	stopHead := context.AfterFunc(headCtx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	resp, err := exporterGet(conn, m.exporter)
	if !stopHead() && err == nil {
		// The deadline struck as the head arrived: the body cannot be read.
		resp.Body.Close()
		err = errors.New("the answer's head came too late")
	}
	if err != nil {
		conn.Close()
		return nil, explain(err)
	}
	// The context bounds the rest of the exchange, body included.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	resp.Body = &connBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
}

// errHeadTooLong ends an exporter answer whose head exceeds maxExporterHead.
var errHeadTooLong = fmt.Errorf("the answer's head is over %d KiB", maxExporterHead>>10)

// exporterGet sends GET /metrics on conn and reads the answer's head (at
// most maxExporterHead bytes); the body is read from conn as the caller
// reads it.
func exporterGet(conn net.Conn, host string) (*http.Response, error) {
	req := "GET /metrics HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: amphora-agent\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	// net/http reads a header line of any length: the cap is on what the
	// head may take from the connection.
	limit := &headLimit{r: conn, left: maxExporterHead}
	resp, err := http.ReadResponse(bufio.NewReaderSize(limit, 32<<10), &http.Request{Method: http.MethodGet})
	if err != nil {
		if limit.left == 0 {
			err = errHeadTooLong
		}
		return nil, fmt.Errorf("reading the exporter's answer: %w", err)
	}
	limit.left = -1
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("exporter answered %s", resp.Status)
	}
	return resp, nil
}

// headLimit reads at most left bytes from r while left >= 0; -1 lifts
// the limit.
type headLimit struct {
	r    io.Reader
	left int
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errHeadTooLong
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}

// connBody closes the connection with the body.
type connBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *connBody) Close() error {
	b.stop()
	b.ReadCloser.Close()
	return b.conn.Close()
}

// capConns lets at most n connections of ln be open at once: Accept
// waits while n are.
func capConns(ln net.Listener, n int) net.Listener {
	return &cappedListener{Listener: ln, open: make(chan struct{}, n), closed: make(chan struct{})}
}

type cappedListener struct {
	net.Listener
	open      chan struct{} // a token per open connection
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *cappedListener) Accept() (net.Conn, error) {
	select {
	case l.open <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.open
		return nil, err
	}
	return &cappedConn{Conn: c, open: l.open}, nil
}

func (l *cappedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// cappedConn gives its token back when closed (once).
type cappedConn struct {
	net.Conn
	open chan struct{}
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.open })
	return err
}
