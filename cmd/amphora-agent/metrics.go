package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/sysinfo"
	"github.com/amphora-agent/amphora-agent/agent/tick"
	"github.com/amphora-agent/amphora-agent/haproxy/promex"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
	"github.com/amphora-agent/amphora-agent/netns"
)

// The metrics endpoint of PROMETHEUS listeners. The controller's HAProxy
// config binds HAProxy's exporter on 127.0.0.1:9101 inside the namespace
// and sends tenants' scrapes to 127.0.0.1:9102 there, where upstream's
// image runs prometheus-proxy; the agent serves that address itself.

const (
	// metricsWatchInterval: how often the namespace is looked at (created
	// late by the first plug, or recreated); upstream retries every second.
	metricsWatchInterval = time.Second
	// metricsFetchTimeout bounds one scrape's read of HAProxy's page. A
	// tenant's scrape through the PROMETHEUS listener is cut by HAProxy
	// after 5 s anyway (the template's timeout server); a direct scrape
	// of a very large page may take longer.
	metricsFetchTimeout = 30 * time.Second
)

// metricsServer listens inside the namespace and translates HAProxy's
// page for each scrape.
type metricsServer struct {
	namespace string
	listen    string // host:port inside the namespace
	exporter  string // HAProxy's exporter, host:port inside the namespace
	log       *zap.Logger
	// utilization gives the CPU and memory gauges (sysinfo by default).
	utilization func() (cpu, mem float64, err error)
	// extra, when set, gives each scrape's other sources of series (the
	// UDP and SCTP listeners' IPVS counters, read once per scrape).
	extra func(ctx context.Context) []promex.Source
	// watched, when set, hears after each look at the namespace whether
	// the endpoint is open (tests).
	watched func(open bool)

	// dial opens a connection to the exporter.
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	translators sync.Pool
}

func newMetricsServer(namespace, listen, exporter string, log *zap.Logger) *metricsServer {
	m := &metricsServer{namespace: namespace, listen: listen, exporter: exporter, log: log,
		utilization: sysinfo.Reader{}.Utilization}
	// HAProxy's exporter listens on the namespace's loopback.
	m.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return netns.Dial(ctx, m.namespace, network, addr)
	}
	m.translators.New = func() any { return new(promex.Translator) }
	return m
}

// Run serves until ctx ends: it listens inside the namespace once it
// exists and listens again when the name comes to mean a new namespace.
func (m *metricsServer) Run(ctx context.Context) error {
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
			lastErr = ""
			srv = &http.Server{
				Handler:           m,
				ReadHeaderTimeout: readHeaderTimeout,
				WriteTimeout:      metricsFetchTimeout,
				MaxHeaderBytes:    maxHeaderBytes,
				ErrorLog:          zap.NewStdLog(m.log),
			}
			served = id
			go srv.Serve(ln)
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
// when HAProxy's exporter cannot be read.
func (m *metricsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNotImplemented)
		return
	}
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
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()

	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/plain; version=0.0.4")
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	out := bufio.NewWriterSize(w, 32<<10)
	tr := m.translators.Get().(*promex.Translator)
	defer m.translators.Put(tr)
	tr.Sources = nil
	if m.extra != nil {
		tr.Sources = m.extra(ctx)
	}
	err = promex.WriteUtilization(out, cpu, mem)
	if err == nil {
		err = tr.Translate(out, resp.Body)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		// The status is sent: end the response unfinished (no last
		// chunk), so the scraper sees a failure, not a short page.
		m.log.Warn("metrics: scrape cut short", zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// fetch opens HAProxy's page; anything but a 200 is an error. It is one
// HTTP/1.1 GET on a fresh connection, closed with the body, as upstream
// fetches it (nothing is kept across a namespace that may be recreated).
// net/http's client is not used: its transport (proxies, HTTP/2, pools,
// cookies) would add about half a megabyte to the agent's resident size
// for a request to a fixed loopback address.
func (m *metricsServer) fetch(ctx context.Context) (*http.Response, error) {
	conn, err := m.dial(ctx, "tcp", m.exporter)
	if err != nil {
		return nil, err
	}
	// The context bounds the whole exchange, body included.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	body, err := exporterGet(conn, m.exporter)
	if err != nil {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, err
	}
	body.Body = &connBody{ReadCloser: body.Body, conn: conn, stop: stop}
	return body, nil
}

// exporterGet sends GET /metrics on conn and reads the answer's head; the
// body is read from conn as the caller reads it.
func exporterGet(conn net.Conn, host string) (*http.Response, error) {
	req := "GET /metrics HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: amphora-agent\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 32<<10), &http.Request{Method: http.MethodGet})
	if err != nil {
		return nil, fmt.Errorf("reading the exporter's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("exporter answered %s", resp.Status)
	}
	return resp, nil
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

// lvsSeries gives each scrape the UDP and SCTP listeners' series: the
// IPVS table read once (only while such a listener runs). A failed read
// leaves those series out of that scrape and is logged.
func lvsSeries(layout keepalived.LVSLayout, table ipvs.Reader, log *zap.Logger) func(context.Context) []promex.Source {
	return func(ctx context.Context) []promex.Source {
		states, err := layout.LVSStates(ctx, table)
		if err != nil {
			log.Warn("metrics: reading the UDP and SCTP listeners", zap.Error(err))
		}
		if len(states) == 0 {
			return nil
		}
		return []promex.Source{keepalived.LVSMetrics(states)}
	}
}
