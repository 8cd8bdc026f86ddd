//go:build system

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/testenv"
)

// TestReservedIDsChangeNothing sends the agent's own names under base_path
// as load balancer ids, over mutual TLS to the real binary: every upload
// is refused with a 400 in the spec's shape, every delete and action gets
// the unknown-id answer, and no file under base_path changes. A real
// delete afterwards removes only that load balancer's files.
func TestReservedIDsChangeNothing(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const lb = "5b6c3d0e-7f1a-4b2c-9d3e-0f1a2b3c4d5e"
	base := e.Path("lib")
	cfg := []byte(plainLBConfig(base, lb, "127.0.0.1:8081", "127.0.0.1:8443"))
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+lb+"/haproxy", cfg); status != 202 {
		t.Fatalf("upload %s: %d %s", lb, status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/certificates/x.pem", []byte("pem")); status != 200 {
		t.Fatalf("certificate upload: %d %s", status, body)
	}
	// Stand-ins for what VRRP, LVS, the network calls and the heartbeat
	// keep under base_path, and a folder that is no load balancer.
	for _, p := range []string{
		"vrrp/octavia-keepalived.conf", "vrrp/agent-state.json", "vrrp/check_script.sh",
		"vrrp/check_scripts/haproxy_check_script.sh", "lvs/octavia-keepalivedlvs-l1.conf",
		"plugged_interfaces", "nftables-vip.rules", "stats_counters.json", "stray/notes",
	} {
		path := filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("kept: "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, base)

	reserved := []string{"vrrp", "lvs", "certs", "plugged_interfaces"}
	// Names with a dot never pass the id pattern; they are answered alike.
	dotted := []string{lb + ".sock", "stats_counters.json", "nftables-vip.rules", "haproxy-default-user-group.conf"}
	for _, id := range append(append([]string{}, reserved...), dotted...) {
		status, ctype, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+id+"/haproxy", cfg)
		var answer struct{ Message, Details string }
		if err := json.Unmarshal(body, &answer); err != nil || status != 400 || ctype != "application/json" || answer.Message != "Invalid request" ||
			!strings.Contains(answer.Details, `"`+id+`"`) {
			t.Errorf("upload %s: %d %s %s", id, status, ctype, body)
		}
		if !strings.Contains(id, ".") && !strings.Contains(answer.Details, "is reserved") {
			t.Errorf("upload %s: %s does not say the id is reserved", id, body)
		}
		if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+id+"/certificates/x.pem", []byte("pem")); status != 400 {
			t.Errorf("certificate upload for %s: %d %s", id, status, body)
		}
		if status, _, body := e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 || string(body) != `{"message":"OK"}` {
			t.Errorf("delete %s: %d %s", id, status, body)
		}
		notFound := `{"message":"Loadbalancer Not Found","details":"No loadbalancer with UUID: ` + id + `"}`
		for _, action := range []string{"start", "stop", "reload"} {
			if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+id+"/"+action, nil); status != 404 || string(body) != notFound {
				t.Errorf("%s %s: %d %s", action, id, status, body)
			}
		}
		if status, _, body := e.Do("GET", "/1.0/loadbalancer/"+id+"/haproxy", nil); status != 404 || string(body) != notFound {
			t.Errorf("config of %s: %d %s", id, status, body)
		}
	}
	for _, id := range []string{"stray", "unknown"} {
		if status, _, body := e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 || string(body) != `{"message":"OK"}` {
			t.Errorf("delete %s: %d %s", id, status, body)
		}
	}
	if diff := snapshotDiff(before, snapshot(t, base)); diff != "" {
		t.Fatalf("base_path changed:\n%s", diff)
	}

	// The load balancer itself goes, with its certificates, and nothing else.
	if status, _, body := e.Do("DELETE", "/1.0/listeners/"+lb, nil); status != 200 {
		t.Fatalf("delete %s: %d %s", lb, status, body)
	}
	for _, p := range []string{filepath.Join(base, lb), filepath.Join(base, "certs", lb)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after delete: %v", p, err)
		}
	}
	// With vrrp/check_script.sh present VRRP is in use, so the HAProxy
	// check is refreshed without the deleted load balancer.
	check := "/vrrp/check_scripts/haproxy_check_script.sh"
	if got, err := os.ReadFile(filepath.Join(base, check)); err != nil || string(got) != "haproxy-vrrp-check ; exit $?" {
		t.Errorf("check script after the delete: %q %v", got, err)
	}
	var lines []string
	for _, l := range strings.Split(snapshotDiff(before, snapshot(t, base)), "\n") {
		if l != "" && !strings.HasPrefix(l, "- /"+lb) && !strings.HasPrefix(l, "- /certs/"+lb) && !strings.HasPrefix(l, "~ "+check+" ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 0 {
		t.Fatalf("deleting %s changed more than its files:\n%s", lb, strings.Join(lines, "\n"))
	}
}
