package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// fakeService records calls; its mutating methods take its lock as the
// agent's take the mutation lock.
type fakeService struct {
	mu        sync.Mutex
	lock      chan struct{}
	infoErr   error
	configErr error
	certErr   error
	gotBody   []byte
	calls     []string
	// net answers the network calls (see network_test.go).
	net fakeNetwork
}

func newFake() *fakeService { return &fakeService{lock: make(chan struct{}, 1)} }

// exclusive runs fn holding the lock, or fails once ctx ends.
func (f *fakeService) exclusive(ctx context.Context, fn func()) error {
	select {
	case f.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.lock }()
	fn()
	return nil
}

func (f *fakeService) Info(ctx context.Context) (agent.Info, error) {
	return agent.Info{Hostname: "amp", HAProxyVersion: "2.6.12", APIVersion: "1.0"}, f.infoErr
}

func (f *fakeService) Details(ctx context.Context) (agent.Details, error) {
	return agent.Details{Hostname: "amp", Listeners: []string{}}, nil
}

func (f *fakeService) Listeners(ctx context.Context) ([]agent.ListenerStatus, error) {
	return []agent.ListenerStatus{}, nil
}

// Load balancer calls are recorded by name and arguments, so routing
// tests can see which handler a path reached.
func (f *fakeService) call(parts ...string) {
	f.mu.Lock()
	f.calls = append(f.calls, strings.Join(parts, " "))
	f.mu.Unlock()
}

func (f *fakeService) UploadHAProxy(ctx context.Context, amp, lb string, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("upload", amp, lb, string(body)) }); err != nil {
		return "", err
	}
	return "etag-" + lb, nil
}

func (f *fakeService) HAProxyConfig(_ context.Context, lb string) ([]byte, string, error) {
	f.call("config", lb)
	return []byte("global\n"), "md5-" + lb, nil
}

func (f *fakeService) LoadBalancerAction(ctx context.Context, id, action string) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("action", id, action) }); err != nil {
		return "", err
	}
	return "Listener " + id + " reloaded", nil
}

func (f *fakeService) DeleteListener(ctx context.Context, id string) error {
	return f.exclusive(ctx, func() { f.call("delete", id) })
}

func (f *fakeService) ValidateCertificateName(name string) error {
	f.call("validate", name)
	return nil
}

func (f *fakeService) PutCertificate(ctx context.Context, lb, name string, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("put-cert", lb, name, string(body)) }); err != nil {
		return "", err
	}
	return "md5-" + name, nil
}

func (f *fakeService) CertificateMD5(_ context.Context, lb, name string) (string, error) {
	f.call("get-cert", lb, name)
	return "md5-" + name, nil
}

func (f *fakeService) DeleteCertificate(ctx context.Context, lb, name string) error {
	return f.exclusive(ctx, func() { f.call("delete-cert", lb, name) })
}

func (f *fakeService) UploadVRRP(ctx context.Context, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("vrrp-upload", string(body)) }); err != nil {
		return "", err
	}
	return "etag-vrrp", nil
}

func (f *fakeService) VRRPAction(ctx context.Context, action string) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("vrrp", action) }); err != nil {
		return "", err
	}
	return "keepalived " + action + "ed", nil
}

func (f *fakeService) UploadLVS(ctx context.Context, amp, id string, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.call("lvs-upload", amp, id, string(body)) }); err != nil {
		return "", err
	}
	return "etag-" + id, nil
}

func (f *fakeService) LVSConfig(_ context.Context, id string) ([]byte, error) {
	f.call("lvs-config", id)
	if id == "missing" {
		return nil, fault.NotFound("UDP Listener Not Found", "No UDP listener with UUID: "+id)
	}
	return []byte("virtual_server_group ipv4-group {\n"), nil
}

func (f *fakeService) record(body []byte) {
	f.mu.Lock()
	f.gotBody = body
	f.mu.Unlock()
}

func (f *fakeService) UpdateConfig(ctx context.Context, body []byte) error {
	if err := f.exclusive(ctx, func() { f.record(body) }); err != nil {
		return err
	}
	return f.configErr
}

func (f *fakeService) RotateCertificate(ctx context.Context, body []byte) error {
	if err := f.exclusive(ctx, func() { f.record(body) }); err != nil {
		return err
	}
	return f.certErr
}

func (f *fakeService) PlugVIP(ctx context.Context, vip string, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.record(body) }); err != nil {
		return "", err
	}
	return f.net.plug("vip " + vip)
}

func (f *fakeService) PlugNetwork(ctx context.Context, body []byte) (string, error) {
	if err := f.exclusive(ctx, func() { f.record(body) }); err != nil {
		return "", err
	}
	return f.net.plug("network")
}

func (f *fakeService) InterfaceFor(ctx context.Context, ip string) (string, error) {
	return f.net.lookup(ip)
}

func (f *fakeService) SetInterfaceRules(ctx context.Context, ip string, body []byte) error {
	if err := f.exclusive(ctx, func() { f.record(body) }); err != nil {
		return err
	}
	_, err := f.net.lookup(ip)
	return err
}

func serve(t *testing.T, h http.Handler, method, path, body string) (int, string, string) {
	t.Helper()
	req := httptest.NewRequest(method, "https://amp:9443/", strings.NewReader(body))
	// Set the raw path after construction so "//" survives as sent.
	req.URL.Path = path
	req.RequestURI = path
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
}

const (
	notFoundBody = `{"error":"404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.","http_code":404}`
	methodBody   = `{"error":"405 Method Not Allowed: The method is not allowed for the requested URL.","http_code":405}`
	internalBody = `{"error":"500 Internal Server Error: The server encountered an internal error and was unable to complete your request. Either the server is overloaded or there is an error in the application.","http_code":500}`
)

func TestRouting(t *testing.T) {
	h := NewHandler(newFake(), zap.NewNop(), Options{})
	cases := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/", 200, `{"api_version":"1.0"}`},
		{"GET", "//", 200, `{"api_version":"1.0"}`},
		{"GET", "///", 200, `{"api_version":"1.0"}`},
		{"GET", "/1.0//info", 200, `{"hostname":"amp","haproxy_version":"2.6.12","api_version":"1.0","keepalived_version":"","ipvsadm_version":""}`},
		{"GET", "/1.0/info/", 404, notFoundBody},
		{"GET", "/1.0/listeners", 200, `[]`},
		{"GET", "/1.0/does-not-exist", 404, notFoundBody},
		{"GET", "/2.0/info", 404, notFoundBody},
		{"GET", "/1.0/plug/vip/2001:db8::2", 405, methodBody},
		{"PUT", "/1.0/info", 405, methodBody},
		{"HEAD", "/1.0/info", 200, `{"hostname":"amp","haproxy_version":"2.6.12","api_version":"1.0","keepalived_version":"","ipvsadm_version":""}`},
		{"POST", "/", 405, methodBody},
		{"GET", "/1.0/details", 200, `{"hostname":"amp","haproxy_version":"","api_version":"","networks":null,"active":false,"haproxy_count":0,` +
			`"cpu_count":0,"cpu":{"total":0,"user":"","system":"","soft_irq":""},"memory":{"total":0,"free":0,"buffers":0,"cached":0,` +
			`"swap_used":0,"shared":0,"slab":0},"disk":{"used":0,"available":0},"load":null,"active_tuned_profiles":"","topology":"",` +
			`"topology_status":"","listeners":[],"packages":null,"lvs_listener_process_count":0,"keepalived_version":"","ipvsadm_version":""}`},
		{"DELETE", "/1.0/details", 405, methodBody},
		{"GET", "/1.0/config", 405, methodBody},
		{"PUT", "/1.0/config", 202, `{"message":"OK"}`},
		{"PUT", "/1.0/certificate", 202, `{"message":"OK"}`},
	}
	for _, c := range cases {
		status, ctype, body := serve(t, h, c.method, c.path, "")
		if status != c.status || body != c.body || ctype != "application/json" {
			t.Errorf("%s %s = %d %q %s\nwant %d application/json %s", c.method, c.path, status, ctype, body, c.status, c.body)
		}
	}
}

func TestErrorShapes(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		body   string
	}{
		{"invalid with details", fault.Invalid("Invalid amphora-agent configuration", "x.conf: bad"), 400,
			`{"message":"Invalid amphora-agent configuration","details":"x.conf: bad"}`},
		{"invalid without details", fault.Invalid("Filename has wrong format"), 400, `{"message":"Filename has wrong format"}`},
		{"not found", fault.NotFound("Loadbalancer Not Found", "No loadbalancer with UUID: x"), 404,
			`{"message":"Loadbalancer Not Found","details":"No loadbalancer with UUID: x"}`},
		{"conflict", fault.Conflict("Interface already exists"), 409, `{"message":"Interface already exists"}`},
		{"framework 400", fault.BadRequest("Invalid subnet information"), 400,
			`{"error":"400 Bad Request: Invalid subnet information","http_code":400}`},
		{"internal with details", fault.Internal("Unable to update amphora-agent configuration.", "disk full", errors.New("ENOSPC")), 500,
			`{"message":"Unable to update amphora-agent configuration.","details":"disk full"}`},
		{"untyped error", errors.New("boom"), 500, internalBody},
		{"framework 500", fault.Internalf("reading: %w", errors.New("x")), 500, internalBody},
		{"html-like text not escaped", fault.Invalid("a<b>&c"), 400, `{"message":"a<b>&c"}`},
		// A full disk is named whatever the error's shape.
		{"disk full, framework 500", fault.Internalf("writing x: %w", &os.PathError{Op: "write", Path: "/v/x", Err: syscall.ENOSPC}), 500,
			`{"message":"No space left on device","details":"writing x: write /v/x: no space left on device"}`},
		{"disk full, untyped", fmt.Errorf("recording: %w", syscall.EDQUOT), 500,
			`{"message":"No space left on device","details":"No space left on device: recording: disk quota exceeded"}`},
		{"disk full, own message", fault.Internal("Unable to update amphora-agent configuration.", "", syscall.ENOSPC), 500,
			`{"message":"Unable to update amphora-agent configuration.","details":"No space left on device"}`},
		{"disk full, details say so", fault.Internal("Error stopping haproxy", "open x: no space left on device", syscall.ENOSPC), 500,
			`{"message":"Error stopping haproxy","details":"open x: no space left on device"}`},
	}
	for _, c := range cases {
		f := newFake()
		f.configErr = c.err
		h := NewHandler(f, zap.NewNop(), Options{})
		status, ctype, body := serve(t, h, "PUT", "/1.0/config", "x")
		if status != c.status || body != c.body || ctype != "application/json" {
			t.Errorf("%s: got %d %q %s\nwant %d %s", c.name, status, ctype, body, c.status, c.body)
		}
	}
}

func TestBodyLimitIs400NotTooLarge(t *testing.T) {
	f := newFake()
	h := NewHandler(f, zap.NewNop(), Options{UploadLimit: func() int64 { return 10 }})
	status, ctype, body := serve(t, h, "PUT", "/1.0/config", strings.Repeat("x", 11))
	want := `{"message":"Request body too large","details":"the request body exceeds the limit of 10 bytes"}`
	if status != 400 || ctype != "application/json" || body != want {
		t.Fatalf("got %d %q %s", status, ctype, body)
	}
	if f.gotBody != nil {
		t.Fatal("service was called with a truncated body")
	}
	status, _, _ = serve(t, h, "PUT", "/1.0/config", strings.Repeat("x", 10))
	if status != 202 || string(f.gotBody) != strings.Repeat("x", 10) {
		t.Fatalf("body at the limit: %d %q", status, f.gotBody)
	}
}

func TestBodiesAreOpaqueBytes(t *testing.T) {
	f := newFake()
	h := NewHandler(f, zap.NewNop(), Options{})
	raw := "\xff\xfe\x00latin-1 \xe9"
	req := httptest.NewRequest("PUT", "/1.0/certificate", strings.NewReader(raw))
	req.Header.Set("Content-Type", "text/html")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 202 || string(f.gotBody) != raw {
		t.Fatalf("status %d, body passed %q", rec.Code, f.gotBody)
	}
}

// A mutation queued behind a long one waits past the budget and runs
// once the lock is free, as upstream's single worker queues requests:
// the controller never retries a 500.
func TestMutationWaitsPastTheBudget(t *testing.T) {
	const budget = 50 * time.Millisecond
	for _, c := range []struct{ method, path string }{
		{"PUT", "/1.0/config"},
		{"PUT", "/1.0/vrrp/upload"},
		// Actions take the lock inside the service.
		{"PUT", "/1.0/loadbalancer/lb1/reload"},
	} {
		f := newFake()
		f.lock <- struct{}{} // another mutation in progress
		h := NewHandler(f, zap.NewNop(), Options{Budget: budget})
		done := make(chan int, 1)
		go func() {
			status, _, _ := serve(t, h, c.method, c.path, "x")
			done <- status
		}()
		select {
		case status := <-done:
			t.Fatalf("%s %s answered %d while another mutation held the lock", c.method, c.path, status)
		case <-time.After(4 * budget):
		}
		<-f.lock // the other mutation ends
		select {
		case status := <-done:
			if status >= 300 {
				t.Fatalf("%s %s queued past the budget: %d, want success", c.method, c.path, status)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s still waits after the lock was freed", c.method, c.path)
		}
	}
}

// A queued mutation whose client goes away stops waiting and changes
// nothing.
func TestMutationGivesUpWhenClientLeaves(t *testing.T) {
	f := newFake()
	f.lock <- struct{}{} // someone else holds the lock forever
	h := NewHandler(f, zap.NewNop(), Options{Budget: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "PUT", "/1.0/config", strings.NewReader("x"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 500 || rec.Header().Get("Content-Type") != "application/json" || len(f.calls) != 0 {
		t.Fatalf("got %d %q, calls %q; want a JSON 500 and nothing done", rec.Code, rec.Header().Get("Content-Type"), f.calls)
	}
}

func TestPanicBecomesJSON500(t *testing.T) {
	h := NewHandler(panicky{newFake()}, zap.NewNop(), Options{})
	status, ctype, body := serve(t, h, "GET", "/1.0/info", "")
	if status != 500 || ctype != "application/json" || body != internalBody {
		t.Fatalf("got %d %q %s", status, ctype, body)
	}
}

type panicky struct{ *fakeService }

func (panicky) Info(context.Context) (agent.Info, error) { panic("bug") }

func TestLoadBalancerRoutes(t *testing.T) {
	cases := []routeCase{
		{"PUT", "/1.0/loadbalancer/amp1/lb1/haproxy", "cfg", 202, `{"message":"OK"}`, "etag-lb1", "application/json",
			[]string{"upload amp1 lb1 cfg"}},
		{"GET", "/1.0/loadbalancer/lb1/haproxy", "", 200, "global\n", "md5-lb1", "text/plain; charset=UTF-8",
			[]string{"config lb1"}},
		// PUT on the download path is the action route with action "haproxy".
		{"PUT", "/1.0/loadbalancer/lb1/haproxy", "", 202, `{"message":"OK","details":"Listener lb1 reloaded"}`, "", "application/json",
			[]string{"action lb1 haproxy"}},
		{"PUT", "/1.0/loadbalancer/lb1/RELOAD", "", 202, `{"message":"OK","details":"Listener lb1 reloaded"}`, "", "application/json",
			[]string{"action lb1 RELOAD"}},
		// The certificate route wins over the haproxy upload.
		{"PUT", "/1.0/loadbalancer/lb1/certificates/haproxy", "pem", 200, `{"message":"OK"}`, "md5-haproxy", "application/json",
			[]string{"validate haproxy", "put-cert lb1 haproxy pem"}},
		{"GET", "/1.0/loadbalancer/lb1/certificates/x.pem", "", 200, `{"md5sum":"md5-x.pem"}`, "md5-x.pem", "application/json",
			[]string{"get-cert lb1 x.pem"}},
		{"DELETE", "/1.0/loadbalancer/lb1/certificates/x.pem", "", 200, `{"message":"OK"}`, "", "application/json",
			[]string{"delete-cert lb1 x.pem"}},
		{"DELETE", "/1.0/listeners/lb1", "", 200, `{"message":"OK"}`, "", "application/json", []string{"delete lb1"}},
		{"POST", "/1.0/loadbalancer/lb1/start", "", 405, methodBody, "", "application/json", nil},
		{"DELETE", "/1.0/loadbalancer/lb1/haproxy", "", 405, methodBody, "", "application/json", nil},
	}
	for _, c := range cases {
		checkRoute(t, c)
	}
}
