package cloud

import (
	"testing"
	"time"
)

// TestAgentRequests reads the request lines of an agent's journal as the
// VM shows them (each record twice: stderr with its time, syslog
// without): two requests, the first started 30 ms before it was logged.
func TestAgentRequests(t *testing.T) {
	journal := `2026-12-01T17:19:33+0000 amphora amphora-agent[305]: 2026-12-01T17:19:33.366Z        DEBUG        api        api/router.go:333        request        {"method": "GET", "path": "//", "status": 200, "took": "30ms", "remote": "198.51.100.1:33490"}
2026-12-01T17:19:33+0000 amphora amphora-agent[305]: api        api/router.go:333        request        {"method": "GET", "path": "//", "status": 200, "took": "30ms", "remote": "198.51.100.1:33490"}
2026-12-01T17:19:34+0000 amphora amphora-agent[305]: 2026-12-01T17:19:34.336Z        DEBUG        api        api/router.go:333        request        {"method": "POST", "path": "/1.0/plug/vip/203.0.113.10", "status": 202, "took": "60ms", "remote": "198.51.100.1:33500"}
`
	a := AgentRequests(journal)
	if a.Requests != 2 || a.Span() != time.Second {
		t.Fatalf("got %d requests over %v, want 2 over 1s (%+v)", a.Requests, a.Span(), a)
	}
}
