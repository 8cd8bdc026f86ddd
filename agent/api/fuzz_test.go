package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// FuzzRouter: any method, path and body reaches a handler or a framework
// answer without a panic (which would be a 500 here, where the service
// never fails) and is answered with a JSON document, except the routes
// that return stored files as they are.
func FuzzRouter(f *testing.F) {
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/1.0/info", ""},
		{"PUT", "/1.0/loadbalancer/amp1/lb1/haproxy", "global\n"},
		{"PUT", "/1.0/loadbalancer/lb1/certificates/a.pem", "pem"},
		{"DELETE", "/1.0/listeners/..%2f..", ""},
		{"POST", "/1.0/plug/vip/203.0.113.10", `{"subnet_cidr": "203.0.113.0/24"}`},
		{"PUT", "/1.0/interface/203.0.113.4/rules", `[]`},
		{"PUT", "/1.0/config", "[DEFAULT]\n"},
		{"PUT", "//1.0//vrrp/upload", "vrrp_instance {}"},
		{"HEAD", "/1.0/listeners/l1/udp_listener", ""},
	} {
		f.Add(c.method, c.path, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") {
			return
		}
		h := NewHandler(newFake(), zap.NewNop(), Options{})
		status, ctype, out := serve(t, h, method, path, string(body))
		if status >= 500 {
			t.Fatalf("%s %q: %d %s", method, path, status, out)
		}
		if ctype == "application/json" && method != http.MethodHead && !json.Valid([]byte(out)) {
			t.Fatalf("%s %q: invalid JSON %q", method, path, out)
		}
	})
}

// validMethod: net/http refuses requests whose method is not a token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, c) {
			return false
		}
	}
	return true
}
