package netns

import (
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
		{`[{"protocol":"TCP","cidr":"","port":80}]`, true},      // any source, as upstream
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
	rules, err := DecodeFirewallRules([]byte(`[{"protocol":"TCP","cidr":"192.0.2.0/24","port":8080},{"protocol":"UDP","cidr":null,"port":80},{"protocol":"UDP","cidr":"","port":53},
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
      iifname != eth1 meta l4proto tcp ct state untracked accept
      iifname eth1 goto amphora_vip_chain
  }
  chain amphora_vip_chain {
      ip saddr 192.0.2.0/24 tcp dport 8080 accept
      udp dport 80 accept
      udp dport 53 accept
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
