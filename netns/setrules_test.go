package netns_test

import (
	"context"
	"os"
	"strings"
	"testing"

	. "github.com/amphora-agent/amphora-agent/netns"
)

// TestSetRules goes through the endpoint's operation with the fake kernel:
// the interface lookup comes first, the file is 0600, nft loads it inside
// the namespace, and a load failure keeps the previous file.
func TestSetRules(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	file := r.cfg.NftablesFile
	if got := r.do(ctx, step{"rules", "192.0.2.1", `[]`}); got != `404 message "Error interface not found for IP address"` {
		t.Errorf("unknown address: %s", got)
	}
	if got := r.do(ctx, step{"rules", "203.0.113.4", `[{"protocol":"TCP"}]`}); got != `400 framework "Invalid rules information"` {
		t.Errorf("bad body: %s", got)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("rules file written by refused requests: %v", err)
	}
	// An empty list before any rules: the drop-all base.
	if got := r.do(ctx, step{"rules", "203.0.113.4", `[]`}); got != "ok: OK" {
		t.Fatal(got)
	}
	if data, _ := os.ReadFile(file); string(data) != RenderBaseRules() {
		t.Errorf("base rules file:\n%s", data)
	}
	body := `[{"protocol":"TCP","cidr":null,"port":80}]`
	if got := r.do(ctx, step{"rules", "203.0.113.4", body}); got != "ok: OK" {
		t.Fatal(got)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("rules file: %v %v", st, err)
	}
	applied, _ := os.ReadFile(file)
	// nft refuses the next file: the applied one stays.
	r.k.Fail = func(op string) error {
		if strings.HasPrefix(op, "Run nft") {
			return os.ErrInvalid
		}
		return nil
	}
	got := r.do(ctx, step{"rules", "203.0.113.4", `[{"protocol":"UDP","cidr":null,"port":53}]`})
	if got != `500 framework ""` {
		t.Errorf("failed load: %s", got)
	}
	if now, _ := os.ReadFile(file); string(now) != string(applied) {
		t.Errorf("rules file after a failed load:\n%s\nwant\n%s", now, applied)
	}
	loads := 0
	for _, l := range r.k.Log() {
		if l == "run in "+testNS+": nft -o -f "+file {
			loads++
		}
	}
	if loads != 2 {
		t.Errorf("nft ran %d times inside the namespace, want 2\n%s", loads, strings.Join(r.k.Log(), "\n"))
	}
}
