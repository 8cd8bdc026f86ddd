package cloud

import (
	"testing"
	"time"
)

// TestAgentRequests reads the agent's request records from its journal
// as AgentJournal prints it on the amphora (use_syslog = True: the
// message carries no time, the journal's receive time counts): two
// requests, the first started 30 ms before it was logged; other records
// and a non-text message are skipped.
func TestAgentRequests(t *testing.T) {
	journal := `{"__CURSOR":"s=1","__REALTIME_TIMESTAMP":"1796145573336000","__MONOTONIC_TIMESTAMP":"1","_BOOT_ID":"b","MESSAGE":"api        api/router.go:333        request        {\"method\": \"GET\", \"path\": \"//\", \"status\": 200, \"took\": \"30ms\", \"remote\": \"198.51.100.1:33490\"}"}
{"__CURSOR":"s=2","__REALTIME_TIMESTAMP":"1796145573500000","MESSAGE":"agent        agent/agent.go:120        listening        {\"address\": \"198.51.100.10:9443\"}"}
{"__CURSOR":"s=3","__REALTIME_TIMESTAMP":"1796145573600000","MESSAGE":[1,2,3]}
{"__CURSOR":"s=4","__REALTIME_TIMESTAMP":"1796145574306000","MESSAGE":"api        api/router.go:333        request        {\"method\": \"POST\", \"path\": \"/1.0/plug/vip/203.0.113.10\", \"status\": 202, \"took\": \"60ms\", \"remote\": \"198.51.100.1:33500\"}"}
`
	a := AgentRequests(journal)
	if a.Requests != 2 || a.Span() != time.Second {
		t.Fatalf("got %d requests over %v, want 2 over 1s (%+v)", a.Requests, a.Span(), a)
	}
}
