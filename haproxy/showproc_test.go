package haproxy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseShowProc(t *testing.T) {
	out := `#<PID>          <type>          <reloads>       <uptime>        <version>      
458             master          2 [failed: 1]   0d00h10m19s     2.6.12-1+deb12u4
# workers
472             worker          1               0d00h10m18s     2.6.12-1+deb12u4
473             worker          1               0d00h10m18s     2.6.12-1+deb12u4
# old workers
461             worker          2               0d00h11m00s     2.6.12-1+deb12u4
# programs

`
	got, err := parseShowProc([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := procTable{MasterPID: 458, FailedReloads: 1, Workers: []int{472, 473}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parseShowProc([]byte("Unknown command.\n")); err == nil {
		t.Fatal("garbage accepted")
	}
}

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
