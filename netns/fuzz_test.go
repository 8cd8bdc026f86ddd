package netns

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// Bodies shaped like the controller's (see network_test.go).
const (
	fuzzVIPBody = `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "fa:16:3e:aa:00:01",
	 "vrrp_ip": "203.0.113.4", "mtu": 1450, "host_routes": [{"nexthop": "203.0.113.5", "destination": "198.51.100.0/24"}],
	 "additional_vips": [{"ip_address": "2001:db8:0:1::10", "subnet_cidr": "2001:db8:0:1::/64", "gateway": null, "host_routes": []}],
	 "is_sriov": false}`
	fuzzNetworkBody = `{"mac_address": "fa:16:3e:bb:00:02", "mtu": 1400,
	 "fixed_ips": [{"ip_address": "198.51.100.20", "subnet_cidr": "198.51.100.0/24", "gateway": "198.51.100.1",
	                "host_routes": [{"nexthop": "198.51.100.254", "destination": "192.0.2.9/24"}]},
	               {"ip_address": "2001:db8:0:2::20", "subnet_cidr": "2001:db8:0:2::/64", "gateway": null, "host_routes": []}],
	 "vip_net_info": {"vip": "203.0.113.10", "subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "x"}}`
)

// badRequest reports whether err is a 400 the API answers as such.
func badRequest(err error) bool {
	fe, ok := fault.As(err)
	return ok && fe.Kind == fault.KindInvalid
}

// checkAddr: validated addresses are plain (no zone, no IPv4-mapped form)
// and their subnet is a masked network of the same family.
func checkAddr(t *testing.T, a netip.Addr, p netip.Prefix) {
	t.Helper()
	if !a.IsValid() || a.Zone() != "" || a.Is4In6() || !p.IsValid() || p.Masked() != p || p.Addr().Is4() != a.Is4() {
		t.Fatalf("validated %v in %v", a, p)
	}
}

// checkHostRoutes: validated host routes have a destination that is a
// network without host bits and a next hop, both of the subnet's family.
func checkHostRoutes(t *testing.T, routes []HostRoute, subnet netip.Prefix) {
	t.Helper()
	for _, hr := range routes {
		dst, err := parseNetwork(hr.Destination)
		hop, herr := parseAddr(hr.Nexthop)
		if err != nil || herr != nil || dst.Masked() != dst || dst.Addr().Is4() != subnet.Addr().Is4() || hop.Is4() != subnet.Addr().Is4() {
			t.Fatalf("validated host route %+v in %v", hr, subnet)
		}
	}
}

// jsonRoundTrip: a decoded request encodes and decodes to itself.
func jsonRoundTrip[T any](t *testing.T, v *T, decode func([]byte) (*T, error)) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decode(data)
	if err != nil || !reflect.DeepEqual(v, again) {
		t.Fatalf("%+v re-encoded as %s decodes to %+v (%v)", v, data, again, err)
	}
}

// FuzzPlugVIP: a plug/vip body is refused with a 400 or decodes to a
// request that round-trips; validation refuses with a 400 or yields plain
// addresses in masked subnets of their own family.
func FuzzPlugVIP(f *testing.F) {
	f.Add("203.0.113.10", []byte(fuzzVIPBody))
	f.Add("2001:db8:0:1::10", []byte(`{"subnet_cidr": "2001:db8:0:1::/64", "gateway": null, "mac_address": "m", "vrrp_ip": "fe80::1%eth0"}`))
	f.Add("::ffff:203.0.113.10", []byte(`{"subnet_cidr": "203.0.113.10", "gateway": "", "mac_address": ""}`))
	f.Add("x", []byte(`[]`))
	f.Fuzz(func(t *testing.T, vip string, body []byte) {
		r, err := DecodeVIPRequest(body)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("decode error %v", err)
			}
			return
		}
		jsonRoundTrip(t, r, DecodeVIPRequest)
		specs, _, err := validateVIPs(vip, r)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("validation error %v", err)
			}
			return
		}
		if len(specs) != 1+len(r.AdditionalVIPs) {
			t.Fatalf("%d specs for %d VIPs", len(specs), 1+len(r.AdditionalVIPs))
		}
		for _, s := range specs {
			checkAddr(t, s.addr, s.subnet)
			checkHostRoutes(t, s.hostRoutes, s.subnet)
		}
		a, bits, err := validateVRRP(r, specs[0].subnet)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("vrrp error %v", err)
			}
			return
		}
		if a.IsValid() && (a.Zone() != "" || a.Is4In6() || bits != specs[0].subnet.Bits()) {
			t.Fatalf("vrrp %v/%d", a, bits)
		}
	})
}

// FuzzPlugNetwork: the same for plug/network bodies and their fixed IPs.
func FuzzPlugNetwork(f *testing.F) {
	f.Add([]byte(fuzzNetworkBody))
	f.Add([]byte(`{"mac_address": "fa:16:3e:cc:00:03", "fixed_ips": [], "mtu": 1500}`))
	f.Add([]byte(`{"mac_address": 1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeNetworkRequest(body)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("decode error %v", err)
			}
			return
		}
		jsonRoundTrip(t, r, DecodeNetworkRequest)
		specs, _, err := validateFixedIPs(r.FixedIPs)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("validation error %v", err)
			}
			return
		}
		for _, s := range specs {
			checkAddr(t, s.addr, s.subnet)
			checkHostRoutes(t, s.hostRoutes, s.subnet)
		}
	})
}

// FuzzFirewallRules: a rules body is refused with a 400 or gives rules
// whose nftables lines are exactly one line each, built only from the
// protocol, a plain network and a port in range; the rules re-encoded as
// the controller sends them decode to themselves.
func FuzzFirewallRules(f *testing.F) {
	f.Add([]byte(`[{"protocol":"TCP","cidr":null,"port":80},{"protocol":"UDP","cidr":"198.51.100.0/24","port":53},` +
		`{"protocol":"SCTP","cidr":"2001:db8::/32","port":9000},{"protocol":"vrrp","cidr":"203.0.113.4","port":112}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"protocol":"TCP","cidr":"0.0.0.0/0","port":1.5}] []`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rules, err := DecodeFirewallRules(body)
		if err != nil {
			if !badRequest(err) {
				t.Fatalf("decode error %v", err)
			}
			return
		}
		type item struct {
			Protocol string  `json:"protocol"`
			CIDR     *string `json:"cidr"`
			Port     int     `json:"port"`
		}
		items := make([]item, 0, len(rules))
		for _, r := range rules {
			if r.Port < 1 || r.Port > 65535 {
				t.Fatalf("rule %+v", r)
			}
			if r.CIDR != nil && strings.Trim(*r.CIDR, "0123456789abcdefABCDEF.:/") != "" {
				t.Fatalf("cidr %q reaches the rules file", *r.CIDR)
			}
			if line := ruleLine(r); strings.ContainsAny(line, "\n;{}#") {
				t.Fatalf("rule line %q", line)
			}
			items = append(items, item(r))
		}
		if n := strings.Count(renderRules(rules), "\n"); n != strings.Count(renderRules(nil), "\n")+len(rules) {
			t.Fatalf("%d rules render to %d lines", len(rules), n)
		}
		data, _ := json.Marshal(items)
		again, err := DecodeFirewallRules(data)
		if err != nil || !reflect.DeepEqual(rules, again) {
			t.Fatalf("%+v re-encoded as %s: %+v, %v", rules, data, again, err)
		}
	})
}

// FuzzInterfaceFile: an interface file decodes or is refused; a decoded
// one encodes to bytes that decode to the same description, and encoding
// is stable.
func FuzzInterfaceFile(f *testing.F) {
	for _, golden := range testkit.ReadFiles(f, "testdata/plug/*.golden") {
		// The files' JSON follows "file interfaces/<name>.json" lines and
		// ends with a "}" line.
		for _, part := range strings.Split(string(golden.Data), "\nfile interfaces/")[1:] {
			_, rest, _ := strings.Cut(part, "\n")
			if doc, _, ok := strings.Cut(rest, "\n}\n"); ok {
				f.Add([]byte(doc + "\n}"))
			}
		}
	}
	lo, _ := LoFile().Encode()
	f.Add(lo)
	f.Add([]byte(`{"name":"eth9","addresses":[{"dhcp":true},{"ipv6auto":true}],"routes":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := decodeInterfaceFile(data)
		if err != nil {
			return
		}
		enc, err := file.Encode()
		if err != nil {
			t.Fatalf("encoding %+v: %v", file, err)
		}
		again, err := decodeInterfaceFile(enc)
		if err != nil {
			t.Fatalf("encoded file does not decode: %v\n%s", err, enc)
		}
		enc2, err := again.Encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		// Encoding fills empty lists; apart from that the description
		// is unchanged.
		norm := func(x *InterfaceFile) InterfaceFile {
			c := *x
			for _, l := range []*[]Command{&c.Scripts.Up, &c.Scripts.Down} {
				if len(*l) == 0 {
					*l = nil
				}
			}
			if len(c.Addresses) == 0 {
				c.Addresses = nil
			}
			if len(c.Routes) == 0 {
				c.Routes = nil
			}
			if len(c.Rules) == 0 {
				c.Rules = nil
			}
			return c
		}
		if a, b := norm(file), norm(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("%+v, then %+v after encoding", a, b)
		}
	})
}
