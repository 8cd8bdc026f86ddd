package netns

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// TestDecodeFirewallRules checks upstream's schema (plus the stricter
// value checks the file needs).
func TestDecodeFirewallRules(t *testing.T) {
	cases := []struct {
		body string
		ok   bool
	}{
		{`[]`, true},
		{`[{"protocol":"TCP","cidr":"192.0.2.0/24","port":8080},{"protocol":"UDP","cidr":null,"port":80},{"protocol":"vrrp","cidr":"203.0.113.5/32","port":112}]`, true},
		{`[{"protocol":"SCTP","cidr":"2001:db8::/64","port":1}]`, true},
		{`[{"protocol":"TCP","cidr":"192.0.2.7","port":65535}]`, true},
		{`[{"protocol":"TCP","cidr":null,"port":80.0}]`, true},
		{`[{"protocol":"VRRP","cidr":null,"port":112}]`, false}, // vrrp is lower case only
		{`[{"protocol":"tcp","cidr":null,"port":80}]`, false},
		{`[{"protocol":"ICMP","cidr":null,"port":80}]`, false},
		{`[{"protocol":"TCP","cidr":null,"port":0}]`, false},
		{`[{"protocol":"TCP","cidr":null,"port":65536}]`, false},
		{`[{"protocol":"TCP","cidr":null,"port":80.5}]`, false},
		{`[{"protocol":"TCP","cidr":null,"port":"80"}]`, false},
		{`[{"protocol":"TCP","cidr":null}]`, false},
		{`[{"protocol":"TCP","port":80}]`, false},
		{`[{"protocol":"TCP","cidr":null,"port":80,"extra":1}]`, false},
		{`[{"protocol":"TCP","cidr":"not-a-net","port":80}]`, false},
		{`[{"protocol":"TCP","cidr":5,"port":80}]`, false},
		{`[1]`, false},
		{`{"protocol":"TCP","cidr":null,"port":80}`, false},
		{`null`, false},
		{``, false},
		{`[] []`, false},
	}
	for _, tc := range cases {
		_, err := DecodeFirewallRules([]byte(tc.body))
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.body, err)
		}
		if !tc.ok {
			fe, isFault := fault.As(err)
			if !isFault || !fe.Framework || fe.Kind != fault.KindInvalid || fe.Message != "Invalid rules information" {
				t.Errorf("%s: got %v, want the framework 400 Invalid rules information", tc.body, err)
			}
		}
	}
}

func TestRenderRules(t *testing.T) {
	rules, err := DecodeFirewallRules([]byte(`[{"protocol":"TCP","cidr":"192.0.2.0/24","port":8080},{"protocol":"UDP","cidr":null,"port":80},
		{"protocol":"SCTP","cidr":"0.0.0.0/0","port":9000},{"protocol":"TCP","cidr":"2001:db8::/64","port":443},{"protocol":"vrrp","cidr":"203.0.113.5/32","port":112}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := `table inet amphora_table {}
delete table inet amphora_table
table inet amphora_table {
  chain amphora_chain {
    type filter hook input priority filter; policy drop;
      ct state vmap { established : accept, related : accept, invalid : drop }
      iif lo accept
      ip saddr 127.0.0.0/8 drop
      ip6 saddr ::1 drop
      icmp type destination-unreachable accept
      icmpv6 type { nd-neighbor-solicit, nd-router-advert, nd-neighbor-advert, packet-too-big, destination-unreachable } accept
      udp sport 67 udp dport 68 accept
      udp sport 547 udp dport 546 accept
      iifname eth1 goto amphora_vip_chain
  }
  chain amphora_vip_chain {
      ip saddr 192.0.2.0/24 tcp dport 8080 accept
      udp dport 80 accept
      sctp dport 9000 accept
      ip6 saddr 2001:db8::/64 tcp dport 443 accept
      ip saddr 203.0.113.5/32 ip protocol 112 accept
  }
}
`
	if got := renderRules(rules); got != want {
		t.Errorf("rules file\n%s\nwant\n%s", got, want)
	}
}

// TestSetRules goes through the endpoint's operation with the fake kernel:
// the interface lookup comes first, the file is 0600, nft loads it inside
// the namespace, and a load failure keeps the previous file.
func TestSetRules(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	file := r.n.cfg.NftablesFile
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
	if data, _ := os.ReadFile(file); string(data) != renderBaseRules() {
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
	r.k.fail = func(op string) error {
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
	for _, l := range r.k.log {
		if l == "run in "+testNS+": nft -o -f "+file {
			loads++
		}
	}
	if loads != 2 {
		t.Errorf("nft ran %d times inside the namespace, want 2\n%s", loads, strings.Join(r.k.log, "\n"))
	}
}
