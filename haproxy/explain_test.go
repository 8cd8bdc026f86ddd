package haproxy

import (
	"strings"
	"testing"
)

func TestExplainOutput(t *testing.T) {
	out := explainOutput("[ALERT]    (31710) : [haproxy.main()] Cannot raise FD limit to 100040, limit is 20000.")
	for _, want := range []string{"needs 100040 open files", "allowed 20000", "connection_limit", "LimitNOFILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q lacks %q", out, want)
		}
	}
	if got := explainOutput("[ALERT] something else"); got != "[ALERT] something else" {
		t.Errorf("unrelated output changed: %q", got)
	}
}
