package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/netns"
)

// fakeNetwork answers the network calls of fakeService: plugs return err
// or a details text naming the call; lookups know the addresses in ifaces.
type fakeNetwork struct {
	err    error
	ifaces map[string]string
}

func (n fakeNetwork) plug(what string) (string, error) {
	if n.err != nil {
		return "", n.err
	}
	return "plugged " + what, nil
}

func (n fakeNetwork) lookup(ip string) (string, error) {
	if ip == "xx" {
		return "", fault.Invalid("Invalid IP address")
	}
	if name, ok := n.ifaces[ip]; ok {
		return name, nil
	}
	return "", fault.NotFound("Error interface not found for IP address")
}

func TestNetworkRoutes(t *testing.T) {
	cases := []struct {
		name         string
		net          fakeNetwork
		method, path string
		body         string
		status       int
		want         string
	}{
		{"plug vip", fakeNetwork{}, "POST", "/1.0/plug/vip/203.0.113.10", `{}`, 202, `{"message":"OK","details":"plugged vip 203.0.113.10"}`},
		{"plug vip ipv6 path", fakeNetwork{}, "POST", "/1.0/plug/vip/2001:db8::2", `{}`, 202, `{"message":"OK","details":"plugged vip 2001:db8::2"}`},
		{"plug vip no nic", fakeNetwork{err: fmt.Errorf("wrapped: %w", netns.ErrNoInterface)}, "POST", "/1.0/plug/vip/203.0.113.10", `{}`, 404,
			`{"details":"No suitable network interface found"}`},
		{"plug vip bad body", fakeNetwork{err: fault.BadRequest("Invalid subnet information")}, "POST", "/1.0/plug/vip/203.0.113.10", `x`, 400,
			`{"error":"400 Bad Request: Invalid subnet information","http_code":400}`},
		{"plug vip exists", fakeNetwork{err: fault.Conflict("Interface already exists")}, "POST", "/1.0/plug/vip/203.0.113.10", `{}`, 409,
			`{"message":"Interface already exists"}`},
		{"plug vip failed", fakeNetwork{err: fault.Internal("Error plugging VIP", "boom", nil)}, "POST", "/1.0/plug/vip/203.0.113.10", `{}`, 500,
			`{"message":"Error plugging VIP","details":"boom"}`},
		{"plug vip no segment", fakeNetwork{}, "POST", "/1.0/plug/vip/", `{}`, 404, notFoundBody},
		{"plug vip get", fakeNetwork{}, "GET", "/1.0/plug/vip/203.0.113.10", ``, 405, methodBody},
		{"plug network", fakeNetwork{}, "POST", "/1.0/plug/network", `{}`, 202, `{"message":"OK","details":"plugged network"}`},
		{"plug network no nic", fakeNetwork{err: netns.ErrNoInterface}, "POST", "/1.0/plug/network", `{}`, 404,
			`{"details":"No suitable network interface found"}`},
		{"plug network vip failed", fakeNetwork{err: fault.Internal("Error plugging vip", "boom", nil)}, "POST", "/1.0/plug/network", `{}`, 500,
			`{"message":"Error plugging vip","details":"boom"}`},
		{"plug network put", fakeNetwork{}, "PUT", "/1.0/plug/network", `{}`, 405, methodBody},
		{"interface", fakeNetwork{ifaces: map[string]string{"203.0.113.4": "eth1"}}, "GET", "/1.0/interface/203.0.113.4", ``, 200,
			`{"message":"OK","interface":"eth1"}`},
		{"interface ipv6", fakeNetwork{ifaces: map[string]string{"fe80::1": "eth1"}}, "GET", "/1.0/interface/fe80::1", ``, 200,
			`{"message":"OK","interface":"eth1"}`},
		{"interface unknown", fakeNetwork{}, "GET", "/1.0/interface/192.0.2.1", ``, 404, `{"message":"Error interface not found for IP address"}`},
		{"interface bad", fakeNetwork{}, "GET", "/1.0/interface/xx", ``, 400, `{"message":"Invalid IP address"}`},
		{"rules", fakeNetwork{ifaces: map[string]string{"203.0.113.4": "eth1"}}, "PUT", "/1.0/interface/203.0.113.4/rules", `[]`, 200, `{"message":"OK"}`},
		{"rules unknown ip", fakeNetwork{}, "PUT", "/1.0/interface/192.0.2.1/rules", `[]`, 404, `{"message":"Error interface not found for IP address"}`},
		{"rules get", fakeNetwork{}, "GET", "/1.0/interface/192.0.2.1/rules", ``, 405, methodBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.net = tc.net
			h := NewHandler(f, zap.NewNop(), Options{})
			status, ctype, body := serve(t, h, tc.method, tc.path, tc.body)
			if status != tc.status || body != tc.want {
				t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, status, body, tc.status, tc.want)
			}
			if ctype != "application/json" {
				t.Errorf("Content-Type %q", ctype)
			}
			if tc.method != http.MethodGet && tc.status < 400 && string(f.gotBody) != tc.body {
				t.Errorf("service got body %q, want %q", f.gotBody, tc.body)
			}
		})
	}
}

// rulesService checks rules bodies with the real decoder, after the
// interface lookup, as the agent does.
type rulesService struct{ *fakeService }

func (s rulesService) SetInterfaceRules(ctx context.Context, ip string, body []byte) error {
	s.record(body)
	if _, err := s.net.lookup(ip); err != nil {
		return err
	}
	_, err := netns.DecodeFirewallRules(body)
	return err
}

// TestInvalidRulesBody: a rules body the schema refuses gets upstream's
// framework 400, byte for byte, as JSON; an unknown address is refused
// before the body is looked at.
func TestInvalidRulesBody(t *testing.T) {
	const want = `{"error":"400 Bad Request: Invalid rules information","http_code":400}`
	f := newFake()
	f.net = fakeNetwork{ifaces: map[string]string{"203.0.113.4": "eth1", "2001:db8::4": "eth1"}}
	h := NewHandler(rulesService{f}, zap.NewNop(), Options{})
	for _, body := range []string{
		``,
		`not json`,
		`{"protocol":"TCP","cidr":null,"port":80}`,
		`[{"protocol":"tcp","cidr":null,"port":80}]`,
		`[{"protocol":"VRRP","cidr":null,"port":112}]`,
		`[{"protocol":"TCP","cidr":null,"port":0}]`,
		`[{"protocol":"TCP","cidr":null,"port":65536}]`,
		`[{"protocol":"TCP","port":80}]`,
		`[{"protocol":"TCP","cidr":null,"port":80,"extra":true}]`,
		`[{"protocol":"TCP","cidr":"<script>","port":80}]`,
	} {
		for _, ip := range []string{"203.0.113.4", "2001:db8::4"} {
			status, ctype, got := serve(t, h, "PUT", "/1.0/interface/"+ip+"/rules", body)
			if status != http.StatusBadRequest || ctype != "application/json" || got != want {
				t.Errorf("PUT rules %s %q = %d %q %q\nwant 400 \"application/json\" %q", ip, body, status, ctype, got, want)
			}
		}
	}
	status, ctype, got := serve(t, h, "PUT", "/1.0/interface/192.0.2.1/rules", `not json`)
	if status != http.StatusNotFound || ctype != "application/json" || got != `{"message":"Error interface not found for IP address"}` {
		t.Errorf("unknown address with a bad body = %d %q %s, want the lookup's 404", status, ctype, got)
	}
	status, _, got = serve(t, h, "PUT", "/1.0/interface/203.0.113.4/rules", `[{"protocol":"vrrp","cidr":"203.0.113.5/32","port":112}]`)
	if status != http.StatusOK || got != `{"message":"OK"}` {
		t.Errorf("valid rules = %d %s", status, got)
	}
}
