package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// Service is what the handlers need from the agent. Its mutating methods
// take the agent's mutation lock themselves: this package never holds it.
type Service interface {
	Info(ctx context.Context) (agent.Info, error)
	Details(ctx context.Context) (agent.Details, error)
	Listeners(ctx context.Context) ([]agent.ListenerStatus, error)
	UpdateConfig(ctx context.Context, body []byte) error
	RotateCertificate(ctx context.Context, body []byte) error
	PlugVIP(ctx context.Context, vip string, body []byte) (string, error)
	PlugNetwork(ctx context.Context, body []byte) (string, error)
	InterfaceFor(ctx context.Context, ip string) (string, error)
	SetInterfaceRules(ctx context.Context, ip string, body []byte) error

	UploadHAProxy(ctx context.Context, amphoraID, lb string, body []byte) (string, error)
	HAProxyConfig(ctx context.Context, lb string) ([]byte, string, error)
	LoadBalancerAction(ctx context.Context, id, action string) (string, error)
	DeleteListener(ctx context.Context, id string) error
	ValidateCertificateName(name string) error
	PutCertificate(ctx context.Context, lb, name string, body []byte) (string, error)
	CertificateMD5(ctx context.Context, lb, name string) (string, error)
	DeleteCertificate(ctx context.Context, lb, name string) error

	UploadVRRP(ctx context.Context, body []byte) (string, error)
	VRRPAction(ctx context.Context, action string) (string, error)

	UploadLVS(ctx context.Context, amphoraID, id string, body []byte) (string, error)
	LVSConfig(ctx context.Context, id string) ([]byte, error)
}

// Options tune the HTTP surface.
type Options struct {
	// UploadLimit returns the largest request body accepted, read per
	// request so a config change applies without restart.
	UploadLimit func() int64
	// Budget bounds each read and the reading of each request body: the
	// controller gives up (and re-sends) after 60 s, so they must end well
	// before. A mutation's wait for the lock is not bounded by it.
	Budget time.Duration
}

// DefaultBudget leaves a wide margin under the controller's 60 s read
// timeout.
const DefaultBudget = 45 * time.Second

type handler func(w http.ResponseWriter, r *http.Request) error

type server struct {
	svc  Service
	log  *zap.Logger
	opts Options
}

// NewHandler returns the agent's whole HTTP handler.
func NewHandler(svc Service, log *zap.Logger, opts Options) http.Handler {
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.UploadLimit == nil {
		opts.UploadLimit = func() int64 { return 64 << 20 }
	}
	s := &server{svc: svc, log: log, opts: opts}

	r := mux.NewRouter()
	// Paths are normalized by collapseSlashes only; mux must not redirect
	// (upstream answers /1.0/info/ with 404, not a redirect).
	r.SkipClean(true)
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeFramework(w, http.StatusNotFound, descNotFound)
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeFramework(w, http.StatusMethodNotAllowed, descMethodNotAllowed)
	})

	// GET routes answer HEAD too, as upstream's framework does.
	reads := []string{http.MethodGet, http.MethodHead}

	// Registration order is match order: where two patterns overlap, the
	// one upstream prefers is registered first (see the spec's precedence
	// list).
	r.Handle("/", s.read(s.versionDiscovery)).Methods(reads...)
	r.Handle("/1.0/info", s.read(s.info)).Methods(reads...)
	r.Handle("/1.0/details", s.read(s.details)).Methods(reads...)
	r.Handle("/1.0/listeners", s.read(s.listeners)).Methods(reads...)
	r.Handle("/1.0/listeners/{object_id}", s.mutate(s.deleteListener)).Methods(http.MethodDelete)
	r.Handle("/1.0/listeners/{amphora_id}/{listener_id}/udp_listener", s.mutate(s.uploadLVS)).Methods(http.MethodPut)
	r.Handle("/1.0/listeners/{listener_id}/udp_listener", s.read(s.getLVS)).Methods(reads...)
	// Certificates before the haproxy upload: upstream reads
	// .../x/certificates/haproxy as a certificate named "haproxy".
	certPath := "/1.0/loadbalancer/{lb_id}/certificates/{filename}"
	r.Handle(certPath, s.mutate(s.putCertificate)).Methods(http.MethodPut)
	r.Handle(certPath, s.read(s.getCertificate)).Methods(reads...)
	r.Handle(certPath, s.mutate(s.deleteCertificate)).Methods(http.MethodDelete)
	r.Handle("/1.0/loadbalancer/{amphora_id}/{lb_id}/haproxy", s.mutate(s.uploadHAProxy)).Methods(http.MethodPut)
	// GET .../{lb}/haproxy downloads the config; PUT on the same path is an
	// action named "haproxy" (400), as upstream.
	r.Handle("/1.0/loadbalancer/{lb_id}/haproxy", s.read(s.getHAProxy)).Methods(reads...)
	// An action's body is never read (a large one is no error).
	r.Handle("/1.0/loadbalancer/{object_id}/{action}", s.unbudgeted(s.loadBalancerAction)).Methods(http.MethodPut)
	r.Handle("/1.0/certificate", s.mutate(s.rotateCertificate)).Methods(http.MethodPut)
	r.Handle("/1.0/config", s.mutate(s.updateConfig)).Methods(http.MethodPut)
	r.Handle("/1.0/plug/vip/{vip}", s.mutate(s.plugVIP)).Methods(http.MethodPost)
	r.Handle("/1.0/plug/network", s.mutate(s.plugNetwork)).Methods(http.MethodPost)
	r.Handle("/1.0/interface/{ip}", s.read(s.getInterface)).Methods(reads...)
	r.Handle("/1.0/interface/{ip}/rules", s.mutate(s.setInterfaceRules)).Methods(http.MethodPut)
	// The upload before the action route: PUT /1.0/vrrp/upload is the
	// upload, not an action named "upload".
	r.Handle("/1.0/vrrp/upload", s.mutate(s.uploadVRRP)).Methods(http.MethodPut)
	r.Handle("/1.0/vrrp/{action}", s.mutate(s.vrrpAction)).Methods(http.MethodPut)

	return s.recoverPanics(s.accessLog(drainBody(collapseSlashes(r))))
}

// unbudgeted wraps a mutating handler that reads no body. It gets no
// budget: the service waits for the mutation lock as long as the client
// does, and bounds the work once the lock is held. The request is recorded
// as the client that asked (caller.With): the work runs detached from it,
// but a start waits for readiness, and a config check runs, as long as
// the client waits, as upstream's do.
func (s *server) unbudgeted(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(caller.With(r.Context()))
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// read wraps a handler that changes nothing: reads run concurrently.
func (s *server) read(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.Budget)
		defer cancel()
		r = r.WithContext(ctx)
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// mutate wraps a handler that changes state. The body is read first,
// within the budget, before the service waits for the mutation lock: a
// slow uploader holds up nobody else. The rest has no budget: upstream's
// single worker queues requests, and the controller retries a timeout but
// never a 500, so a request waits for its turn as long as its client does.
func (s *server) mutate(h handler) http.Handler {
	return s.unbudgeted(func(w http.ResponseWriter, r *http.Request) error {
		bctx, cancel := context.WithTimeout(r.Context(), s.opts.Budget)
		body, err := s.readBody(w, r.WithContext(bctx))
		cancel()
		if err != nil {
			return err
		}
		// The handler gets these very bytes through s.body: no second copy.
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
		r.Body = http.NoBody
		return h(w, r)
	})
}

// drainLimit bounds how much of an oversized body is read and thrown away.
// Clients such as the controller's send the whole body before reading the
// answer; closing the connection early would look like a network error,
// which the controller retries for minutes instead of reporting the 400.
const drainLimit = 1 << 30

// bodyKey holds, in a mutation's context, the body mutate read.
type bodyKey struct{}

// readBody reads the request body within the request's budget (a read
// deadline on the connection, so a stalled uploader is cut off).
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	deadline, ok := r.Context().Deadline()
	if !ok {
		return s.readAll(r)
	}
	// Not every ResponseWriter supports deadlines (test recorders).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline)
	data, err := s.readAll(r)
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	// On failure the deadline stays: draining a stalled body ends with it.
	return data, err
}

// body is the request body mutate read, or
// the body read now for a handler run without that wrapper.
func (s *server) body(r *http.Request) ([]byte, error) {
	if data, ok := r.Context().Value(bodyKey{}).([]byte); ok {
		return data, nil
	}
	return s.readAll(r)
}

// readAll reads the whole request body as opaque bytes, up to the upload
// limit. Content-Type and encoding are ignored, as upstream does. Too
// large is a 400, not a 413: the controller counts a 413 as success.
//
// With a Content-Length (the controller always sends one) the body lands
// in one buffer of exactly its size, so an upload costs its own size in
// memory once, not the 2x of a buffer grown by doubling.
func (s *server) readAll(r *http.Request) ([]byte, error) {
	limit := s.opts.UploadLimit()
	tooLarge := fault.Invalid("Request body too large",
		fmt.Sprintf("the request body exceeds the limit of %d bytes", limit))
	if r.ContentLength > limit {
		// drainBody reads the body, so the client gets this answer.
		return nil, tooLarge
	}
	if r.ContentLength >= 0 {
		data := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, data); err != nil {
			return nil, fault.Invalid("Invalid request body", err.Error())
		}
		return data, nil
	}
	// Without a length: blocks (growing to 1 MiB), joined once at the end,
	// so the body costs at most twice its size while it is read.
	var blocks [][]byte
	total, size := int64(0), 4<<10
	body := io.LimitReader(r.Body, limit+1)
	for {
		blk := make([]byte, size)
		n, err := io.ReadFull(body, blk)
		blocks, total = append(blocks, blk[:n]), total+int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, fault.Invalid("Invalid request body", err.Error())
		}
		size = min(2*size, 1<<20)
	}
	if total > limit {
		return nil, tooLarge
	}
	data := make([]byte, 0, total)
	for _, b := range blocks {
		data = append(data, b...)
	}
	return data, nil
}

// drainBody reads what a handler left of the request body (up to
// drainLimit) before the answer goes out: a client that sends its whole
// body before reading, as the controller's does, would otherwise see a
// reset instead of the error it is being sent.
func drainBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		io.Copy(io.Discard, io.LimitReader(r.Body, drainLimit))
	})
}

// collapseSlashes turns runs of '/' into one before routing: the controller
// asks for version discovery as GET // and must get GET /'s answer.
func collapseSlashes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "//") {
			u := *r.URL
			u.Path = squeeze(u.Path)
			if u.RawPath != "" {
				u.RawPath = squeeze(u.RawPath)
			}
			r2 := r.Clone(r.Context())
			r2.URL = &u
			r = r2
		}
		next.ServeHTTP(w, r)
	})
}

func squeeze(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	prevSlash := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' && prevSlash {
			continue
		}
		prevSlash = c == '/'
		b.WriteByte(c)
	}
	return b.String()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		level := zap.DebugLevel
		if r.Method != http.MethodGet {
			level = zap.InfoLevel
		}
		if ce := s.log.Check(level, "request"); ce != nil {
			ce.Write(zap.String("method", r.Method), zap.String("path", r.URL.Path),
				zap.Int("status", rec.status), zap.Duration("took", time.Since(start)),
				zap.String("remote", r.RemoteAddr))
		}
	})
}

// recoverPanics turns a handler panic into upstream's 500 body instead of
// a dropped connection, which the controller would retry for minutes.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				writeError(w, r, s.log, fmt.Errorf("panic: %v", p))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
