package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestVRRPRoutes(t *testing.T) {
	cases := []struct {
		method, path, body string
		status             int
		resp, etag         string
		calls              []string
	}{
		// The upload route wins over the action route.
		{"PUT", "/1.0/vrrp/upload", "vrrp_instance x {}", 200, `{"message":"OK"}`, "etag-vrrp", []string{"vrrp-upload vrrp_instance x {}"}},
		{"PUT", "//1.0//vrrp/upload", "c", 200, `{"message":"OK"}`, "etag-vrrp", []string{"vrrp-upload c"}},
		{"PUT", "/1.0/vrrp/start", "", 202, `{"message":"OK","details":"keepalived started"}`, "", []string{"vrrp start"}},
		// The action's case reaches the agent, which lower-cases it.
		{"PUT", "/1.0/vrrp/RELOAD", "", 202, `{"message":"OK","details":"keepalived RELOADed"}`, "", []string{"vrrp RELOAD"}},
		{"PUT", "/1.0/vrrp/Upload", "", 202, `{"message":"OK","details":"keepalived Uploaded"}`, "", []string{"vrrp Upload"}},
		{"GET", "/1.0/vrrp/upload", "", 405, methodBody, "", nil},
		{"POST", "/1.0/vrrp/start", "", 405, methodBody, "", nil},
		{"PUT", "/1.0/vrrp", "", 404, notFoundBody, "", nil},
		{"PUT", "/1.0/vrrp/upload/x", "", 404, notFoundBody, "", nil},
	}
	for _, c := range cases {
		checkRoute(t, routeCase{c.method, c.path, c.body, c.status, c.resp, c.etag, "application/json", c.calls})
	}
}

// routeCase is one request to a fake service and what must come of it.
type routeCase struct {
	method, path, body string
	status             int
	resp, etag, ctype  string
	calls              []string
}

func checkRoute(t *testing.T, c routeCase) {
	t.Helper()
	f := newFake()
	h := NewHandler(f, zap.NewNop(), Options{})
	req := httptest.NewRequest(c.method, "/", strings.NewReader(c.body))
	req.URL.Path = c.path
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != c.status || rec.Body.String() != c.resp || rec.Header().Get("ETag") != c.etag ||
		rec.Header().Get("Content-Type") != c.ctype || strings.Join(f.calls, "|") != strings.Join(c.calls, "|") {
		t.Errorf("%s %s = %d %s etag=%q type=%q calls=%q\nwant %d %s etag=%q type=%q calls=%q", c.method, c.path,
			rec.Code, rec.Body.String(), rec.Header().Get("ETag"), rec.Header().Get("Content-Type"), f.calls,
			c.status, c.resp, c.etag, c.ctype, c.calls)
	}
}
