package api

import (
	"bytes"
	"io"
	"net/http/httptest"
	"runtime"
	"testing"

	"go.uber.org/zap"
)

// A large upload is read once into memory of its own size: the body is
// not grown by doubling nor copied again for the handler (a 64 MiB
// upload once cost about 4x its size). Allocation is counted, not
// timed, so the bound is exact.
func TestLargeUploadIsReadOnce(t *testing.T) {
	const size = 64 << 20
	cases := []struct {
		name   string
		length bool // Content-Length sent, as the controller does
		bound  float64
	}{
		{"with Content-Length", true, 1.25},
		// Without a length the buffer grows as it fills.
		{"chunked", false, 2.5},
	}
	payload := bytes.Repeat([]byte("x"), size)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			h := NewHandler(f, zap.NewNop(), Options{UploadLimit: func() int64 { return size }})
			var body io.Reader = bytes.NewReader(payload)
			if !c.length {
				body = io.MultiReader(body) // hides the length
			}
			req := httptest.NewRequest("PUT", "/1.0/certificate", body)
			if !c.length {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			h.ServeHTTP(rec, req)
			runtime.ReadMemStats(&after)
			if rec.Code != 202 || len(f.gotBody) != size {
				t.Fatalf("answer %d %s, %d bytes passed on", rec.Code, rec.Body, len(f.gotBody))
			}
			ratio := float64(after.TotalAlloc-before.TotalAlloc) / size
			t.Logf("%.2fx the body size allocated", ratio)
			if ratio > c.bound {
				t.Fatalf("a %d MiB upload allocated %.2fx its size (bound %.2fx)", size>>20, ratio, c.bound)
			}
		})
	}
}
