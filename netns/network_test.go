package netns_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	// The tests were written inside the package; the dot import keeps
	// them reading the same from outside it, where they must be since
	// netnstest imports netns.
	. "github.com/amphora-agent/amphora-agent/netns"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

var update = flag.Bool("update", false, "rewrite golden files")

const testNS = "amphora-haproxy"

// MACs of the fake host's hot-plugged NICs.
const (
	vipMAC    = "fa:16:3e:aa:00:01"
	memberMAC = "fa:16:3e:bb:00:02"
	otherMAC  = "fa:16:3e:cc:00:03"
)

type rig struct {
	k   *netnstest.Kernel
	n   *Network
	cfg Config
	dir string
	as  bool
}

func newRig(t *testing.T, activeStandby bool) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{k: netnstest.NewKernel(), dir: dir, as: activeStandby}
	// The host's own NIC, and the ports Nova hot-plugged.
	r.k.AddLink("", "eth0", "fa:16:3e:00:00:99")
	r.k.AddLink("", "eth1", vipMAC)
	r.k.AddLink("", "eth2", memberMAC)
	r.k.AddLink("", "eth3", otherMAC)
	if err := os.WriteFile(filepath.Join(dir, "pci-rescan"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.cfg = Config{
		Namespace:        testNS,
		NetworkDir:       filepath.Join(dir, "interfaces"),
		PluggedFile:      filepath.Join(dir, "plugged_interfaces"),
		NftablesFile:     filepath.Join(dir, "nftables-vip.rules"),
		PCIRescanFile:    filepath.Join(dir, "pci-rescan"),
		MasqueradeScript: "/usr/local/bin/lvs-masquerade.sh",
		ActiveStandby:    func() bool { return r.as },
	}
	r.n = NewNetwork(r.cfg, r.k, zaptest.NewLogger(t))
	NoWaits(r.n)
	return r
}

// step is one controller call.
type step struct {
	op   string // vip, network, interface, rules
	arg  string // VIP or IP of the path
	body string
}

func (r *rig) do(ctx context.Context, s step) string {
	var details string
	var err error
	switch s.op {
	case "vip":
		details, err = r.n.PlugVIP(ctx, s.arg, []byte(s.body))
	case "network":
		details, err = r.n.PlugNetwork(ctx, []byte(s.body))
	case "interface":
		details, err = r.n.InterfaceFor(s.arg)
	case "rules":
		err = r.n.SetRules(ctx, s.arg, []byte(s.body))
		details = "OK"
	default:
		panic(s.op)
	}
	return outcome(details, err)
}

func outcome(details string, err error) string {
	if err == nil {
		return "ok: " + details
	}
	fe, ok := fault.As(err)
	if !ok {
		return "error: " + err.Error()
	}
	kind := map[fault.Kind]string{fault.KindInvalid: "400", fault.KindNotFound: "404", fault.KindConflict: "409", fault.KindInternal: "500"}[fe.Kind]
	shape := "message"
	if fe.Framework {
		shape = "framework"
	}
	s := fmt.Sprintf("%s %s %q", kind, shape, fe.Message)
	if fe.HasDetails {
		s += fmt.Sprintf(" details %q", fe.Details)
	}
	return s
}

func (r *rig) state() string {
	s := "## kernel\n" + r.k.Dump() + "## files\n" + dumpFiles(r.dir) + "## log\n" + strings.Join(r.k.Log(), "\n") + "\n"
	// Paths under the test's folder are the same in every run.
	return strings.ReplaceAll(s, r.dir, "$DIR")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "plug", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./netns -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./netns -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

const (
	vipBody4 = `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	 "vrrp_ip": "203.0.113.4", "mtu": 1450,
	 "host_routes": [{"nexthop": "203.0.113.5", "destination": "198.51.100.0/24"}],
	 "additional_vips": [], "is_sriov": false}`
	vipBody6 = `{"subnet_cidr": "2001:db8:0:1::/64", "gateway": "2001:db8:0:1::1", "mac_address": "` + vipMAC + `",
	 "vrrp_ip": "2001:db8:0:1::4", "mtu": 1500, "host_routes": [], "additional_vips": []}`
	vipBodyDual = `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	 "vrrp_ip": "203.0.113.4", "mtu": 1450,
	 "host_routes": [{"nexthop": "203.0.113.5", "destination": "198.51.100.0/24"}],
	 "additional_vips": [{"ip_address": "2001:db8:0:1::10", "subnet_cidr": "2001:db8:0:1::/64",
	                      "gateway": "2001:db8:0:1::1", "host_routes": [{"nexthop": "2001:db8:0:1::5", "destination": "2001:db8:99::/48"}]},
	                     {"ip_address": "203.0.113.11", "subnet_cidr": "203.0.113.0/24", "gateway": null, "host_routes": []}]}`
	memberBody = `{"mac_address": "` + memberMAC + `", "mtu": 1400,
	 "fixed_ips": [{"ip_address": "198.51.100.20", "subnet_cidr": "198.51.100.0/24", "gateway": "198.51.100.1",
	                "host_routes": [{"nexthop": "198.51.100.254", "destination": "192.0.2.0/24"}]},
	               {"ip_address": "2001:db8:0:2::20", "subnet_cidr": "2001:db8:0:2::/64", "gateway": null, "host_routes": []}]}`
	memberBodyChanged = `{"mac_address": "` + memberMAC + `", "mtu": 1500,
	 "fixed_ips": [{"ip_address": "198.51.100.21", "subnet_cidr": "198.51.100.0/24", "gateway": "198.51.100.1", "host_routes": []}]}`
	dhcpBody = `{"mac_address": "` + otherMAC + `", "fixed_ips": [], "mtu": 1500}`
	// The VRRP port gains a member subnet: the controller resends the VIP
	// information with it.
	vipNetInfoBody = `{"mac_address": "` + vipMAC + `", "mtu": 1450,
	 "fixed_ips": [{"ip_address": "198.51.100.30", "subnet_cidr": "198.51.100.0/24", "gateway": null, "host_routes": []}],
	 "vip_net_info": {"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	                  "vrrp_ip": "203.0.113.4", "mtu": 1450, "host_routes": [], "additional_vips": [], "vip": "203.0.113.10"}}`
)

// TestPlugGolden plugs VIPs and member ports into the fake kernel and
// compares the resulting kernel state, files and commands with golden
// files under testdata/plug.
func TestPlugGolden(t *testing.T) {
	cases := []struct {
		name          string
		activeStandby bool
		steps         []step
	}{
		{"single-ipv4", false, []step{
			{"vip", "203.0.113.10", vipBody4},
			{"interface", "203.0.113.10", ""},
			{"interface", "203.0.113.4", ""},
		}},
		{"active-standby-ipv4", true, []step{
			{"vip", "203.0.113.10", vipBody4},
			// keepalived has not added the VIP: only the VRRP address is there.
			{"interface", "203.0.113.10", ""},
			{"interface", "203.0.113.4", ""},
		}},
		{"single-ipv6", false, []step{
			{"vip", "2001:db8:0:1::10", vipBody6},
			{"interface", "2001:0db8:0000:0001:0000:0000:0000:0010", ""},
		}},
		{"active-standby-ipv6", true, []step{
			{"vip", "2001:db8:0:1::10", vipBody6},
		}},
		{"single-dual-stack-additional-vips", false, []step{
			{"vip", "203.0.113.10", vipBodyDual},
			{"interface", "2001:db8:0:1::10", ""},
			{"interface", "203.0.113.11", ""},
		}},
		{"active-standby-dual-stack-additional-vips", true, []step{
			{"vip", "203.0.113.10", vipBodyDual},
		}},
		{"single-sriov", false, []step{
			// SR-IOV: the drop-all firewall is in place before the port
			// comes up; the masquerade script is told.
			{"vip", "203.0.113.10", strings.Replace(vipBody4, `"is_sriov": false`, `"is_sriov": true`, 1)},
		}},
		{"members", false, []step{
			{"vip", "203.0.113.10", vipBody4},
			// Already plugged: the controller counts 409 as done.
			{"vip", "203.0.113.10", vipBody4},
			{"network", "", memberBody},
			{"network", "", dhcpBody},
			// Same MAC again with other fixed IPs: updated in place.
			{"network", "", memberBodyChanged},
			{"network", "", vipNetInfoBody},
			{"interface", "198.51.100.21", ""},
			{"interface", "198.51.100.20", ""},
			// Not hot-plugged yet: PCI rescan and the 404 the controller retries.
			{"network", "", `{"mac_address": "fa:16:3e:dd:00:04", "fixed_ips": []}`},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.activeStandby)
			var b strings.Builder
			for _, s := range tc.steps {
				fmt.Fprintf(&b, "%s %s => %s\n", s.op, s.arg, r.do(context.Background(), s))
			}
			golden(t, tc.name, b.String()+r.state())
		})
	}
}

// TestPlugValidation checks the refusals that happen before anything is
// touched, in upstream's order and words.
func TestPlugValidation(t *testing.T) {
	cases := []struct {
		name string
		s    step
		want string
	}{
		{"vip not json", step{"vip", "203.0.113.10", `not json`}, `400 framework "Invalid subnet information"`},
		{"vip array", step{"vip", "203.0.113.10", `[]`}, `400 framework "Invalid subnet information"`},
		{"vip no gateway key", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "mac_address": "` + vipMAC + `"}`}, `400 framework "Invalid subnet information"`},
		{"vip no mac", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null}`}, `400 framework "Invalid subnet information"`},
		{"vip bad address", step{"vip", "xx", vipBody4}, `400 message "Invalid VIP: 'xx' does not appear to be an IPv4 or IPv6 address"`},
		{"vip host bits", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.5/24", "gateway": null, "mac_address": "` + vipMAC + `"}`},
			`400 message "Invalid VIP: 203.0.113.5/24 has host bits set"`},
		{"additional vip bad", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"additional_vips": [{"ip_address": "2001:db8::zz", "subnet_cidr": "2001:db8::/64", "gateway": null, "host_routes": []}]}`},
			`400 message "Invalid VIP: '2001:db8::zz' does not appear to be an IPv4 or IPv6 address"`},
		{"bad vrrp", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `", "vrrp_ip": "nope"}`},
			`400 message "Invalid VRRP Address: 'nope' does not appear to be an IPv4 or IPv6 address"`},
		{"vip outside its subnet", step{"vip", "198.51.100.10", vipBody4},
			`400 message "Invalid VIP: 198.51.100.10 is not in subnet 203.0.113.0/24"`},
		{"additional vip outside its subnet", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"additional_vips": [{"ip_address": "2001:db8:1::10", "subnet_cidr": "2001:db8::/64", "gateway": null, "host_routes": []}]}`},
			`400 message "Invalid VIP: 2001:db8:1::10 is not in subnet 2001:db8::/64"`},
		{"vrrp of the other family", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `", "vrrp_ip": "2001:db8::4"}`},
			`400 message "Invalid VRRP Address: vrrp_ip 2001:db8::4 is not of the family of subnet_cidr 203.0.113.0/24"`},
		{"host route destination not a network", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"host_routes": [{"destination": "default", "nexthop": "203.0.113.5"}]}`},
			`400 message "Invalid VIP: host_routes[0].destination: 'default' does not appear to be an IPv4 or IPv6 network"`},
		{"host route destination prefix too long", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"host_routes": [{"destination": "198.51.100.0/24", "nexthop": "203.0.113.5"}, {"destination": "198.51.100.7/33", "nexthop": "203.0.113.5"}]}`},
			`400 message "Invalid VIP: host_routes[1].destination: '198.51.100.7/33' does not appear to be an IPv4 or IPv6 network"`},
		{"host route nexthop not an address", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"host_routes": [{"destination": "198.51.100.0/24", "nexthop": "203.0.113.0/24"}]}`},
			`400 message "Invalid VIP: host_routes[0].nexthop: '203.0.113.0/24' does not appear to be an IPv4 or IPv6 address"`},
		{"host route nexthop of the other family", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"host_routes": [{"destination": "198.51.100.0/24", "nexthop": "2001:db8::5"}]}`},
			`400 message "Invalid VIP: host_routes[0].nexthop: 2001:db8::5 is not of the family of subnet 203.0.113.0/24"`},
		{"additional vip host route", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "` + vipMAC + `",
			"additional_vips": [{"ip_address": "2001:db8::10", "subnet_cidr": "2001:db8::/64", "gateway": null, "host_routes": [{"destination": "198.51.100.0/24", "nexthop": "2001:db8::5"}]}]}`},
			`400 message "Invalid VIP: host_routes[0].destination: 198.51.100.0/24 is not of the family of subnet 2001:db8::/64"`},
		{"vip mac missing", step{"vip", "203.0.113.10", `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "fa:16:3e:00:00:00"}`},
			`404 message "No suitable network interface found"`},
		{"network not json", step{"network", "", `{`}, `400 framework "Invalid port information"`},
		{"network no mac", step{"network", "", `{"fixed_ips": []}`}, `400 framework "Invalid port information"`},
		{"network bad ip", step{"network", "", `{"mac_address": "` + memberMAC + `", "fixed_ips": [{"ip_address": "1.2.3", "subnet_cidr": "1.2.3.0/24"}]}`},
			`400 message "Invalid network port"`},
		{"network bad host route", step{"network", "", `{"mac_address": "` + memberMAC + `", "fixed_ips": [{"ip_address": "198.51.100.5", "subnet_cidr": "198.51.100.0/24",
			"host_routes": [{"destination": "10.0.0.0/8", "nexthop": "nowhere"}]}]}`},
			`400 message "Invalid network port" details "fixed_ips[0].host_routes[0].nexthop: 'nowhere' does not appear to be an IPv4 or IPv6 address"`},
		{"interface bad ip", step{"interface", "xx", ""}, `400 message "Invalid IP address"`},
		{"interface unknown ip", step{"interface", "192.0.2.1", ""}, `404 message "Error interface not found for IP address"`},
		{"interface without namespace", step{"interface", "127.0.0.1", ""}, `404 message "Error interface not found for IP address"`},
		{"interface with zone", step{"interface", "fe80::1%eth1", ""}, `404 message "Error interface not found for IP address"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, false)
			if got := r.do(context.Background(), tc.s); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	t.Run("no suitable interface", func(t *testing.T) {
		r := newRig(t, false)
		_, err := r.n.PlugVIP(context.Background(), "203.0.113.10", []byte(`{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "fa:16:3e:00:00:00"}`))
		if !errors.Is(err, ErrNoInterface) {
			t.Fatalf("error %v is not ErrNoInterface", err)
		}
		if data, _ := os.ReadFile(filepath.Join(r.dir, "pci-rescan")); string(data) != "1" {
			t.Errorf("PCI rescan file holds %q, want 1", data)
		}
	})
}

// TestPlugRollback injects a failure at each step of a plug and checks
// that the kernel and the files are left as they were, so the
// controller's retry starts from scratch.
func TestPlugRollback(t *testing.T) {
	cases := []struct {
		name, failOp string
		s            step
		want         string
	}{
		{"vip move", "Move", step{"vip", "203.0.113.10", vipBodyDual}, `500 message "Error plugging VIP"`},
		{"vip address", "AddAddr", step{"vip", "203.0.113.10", vipBodyDual}, `500 message "Error plugging VIP"`},
		{"vip rule", "AddRule", step{"vip", "203.0.113.10", vipBodyDual}, `500 message "Error plugging VIP"`},
		{"vip script", "Run /usr/local/bin/lvs-masquerade.sh add ipv6 eth1", step{"vip", "203.0.113.10", vipBodyDual}, `500 message "Error plugging VIP"`},
		{"member address", "AddAddr", step{"network", "", memberBody}, `500 message "Error plugging network"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, false)
			ctx := context.Background()
			if tc.s.op == "network" {
				// A VIP is plugged already: rollback must leave it alone.
				if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
					t.Fatal(got)
				}
			} else if err := r.k.EnsureNamespace(testNS); err != nil {
				t.Fatal(err)
			}
			before := r.state()
			// Fail the first matching operation that happens after the
			// plug reached the namespace (Move is the first one there).
			failed := false
			r.k.Fail = func(op string) error {
				if !failed && op == tc.failOp {
					failed = true
					return errors.New("injected failure")
				}
				return nil
			}
			got := r.do(ctx, tc.s)
			if !failed {
				t.Fatalf("operation %s never happened", tc.failOp)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %s, want %s ...", got, tc.want)
			}
			r.k.Fail = nil
			after := r.state()
			// The log grows (down scripts of the rollback); compare the
			// kernel and the files.
			if a, b := strings.Split(after, "## log")[0], strings.Split(before, "## log")[0]; a != b {
				t.Errorf("state after the failed plug differs\n--- after\n%s\n--- before\n%s", a, b)
			}
			// The retry converges to the state a first-time plug reaches.
			if got := r.do(ctx, tc.s); !strings.HasPrefix(got, "ok") {
				t.Fatalf("retry: %s", got)
			}
		})
	}
}

// TestUpdateFailureRestoresPrevious: a re-plug of a port already in the
// namespace that fails part-way puts the previous file back and applies it
// again, so the port keeps working with its old addresses.
func TestUpdateFailureRestoresPrevious(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"network", "", memberBody}); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	before := r.state()
	failed := false
	r.k.Fail = func(op string) error {
		if op == "AddAddr" && !failed {
			failed = true
			return errors.New("injected failure")
		}
		return nil
	}
	got := r.do(ctx, step{"network", "", memberBodyChanged})
	if !strings.HasPrefix(got, `500 message "Error plugging network"`) {
		t.Fatalf("got %s", got)
	}
	r.k.Fail = nil
	if a, b := strings.Split(r.state(), "## log")[0], strings.Split(before, "## log")[0]; a != b {
		t.Errorf("state after the failed update differs\n--- after\n%s\n--- before\n%s", a, b)
	}
}

// TestUpdateVIPNetInfoFailure: plug/network with vip_net_info for the VIP
// port, already in the namespace, whose bring-up fails answers upstream's
// 500 {"message": "Error plugging vip", "details": ...} (lower-case vip,
// unlike plug/vip's "Error plugging VIP"), puts the previous VIP file back
// and re-applies it; the controller's retry then succeeds.
func TestUpdateVIPNetInfoFailure(t *testing.T) {
	// The script only runs for a family the update adds: the link is up.
	vipNetInfoBody6 := strings.Replace(vipNetInfoBody, `"ip_address": "198.51.100.30", "subnet_cidr": "198.51.100.0/24"`,
		`"ip_address": "2001:db8:0:2::30", "subnet_cidr": "2001:db8:0:2::/64"`, 1)
	for _, tc := range []struct{ failOp, body string }{
		{"AddAddr", vipNetInfoBody},
		{"Run /usr/local/bin/lvs-masquerade.sh add ipv6 eth1", vipNetInfoBody6},
	} {
		failOp := tc.failOp
		t.Run(failOp, func(t *testing.T) {
			r := newRig(t, false)
			ctx := context.Background()
			if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
				t.Fatal(got)
			}
			before := r.state()
			failed := false
			r.k.Fail = func(op string) error {
				if op == failOp && !failed {
					failed = true
					return errors.New("injected failure")
				}
				return nil
			}
			_, err := r.n.PlugNetwork(ctx, []byte(tc.body))
			if !failed {
				t.Fatalf("operation %s never happened", failOp)
			}
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.KindInternal || fe.Framework || fe.Message != "Error plugging vip" {
				t.Fatalf("got %s, want 500 message \"Error plugging vip\"", outcome("", err))
			}
			if !fe.HasDetails || !strings.Contains(fe.Details, "injected failure") {
				t.Errorf("details %q (has details: %v), want the bring-up error", fe.Details, fe.HasDetails)
			}
			r.k.Fail = nil
			if a, b := strings.Split(r.state(), "## log")[0], strings.Split(before, "## log")[0]; a != b {
				t.Errorf("state after the failed update differs\n--- after\n%s\n--- before\n%s", a, b)
			}
			if got := r.do(ctx, step{"network", "", tc.body}); got != "ok: Updated existing interface eth1" {
				t.Fatalf("retry: %s", got)
			}
			if dump := r.k.Dump(); !strings.Contains(dump, "addr 198.51.100.30/24") && !strings.Contains(dump, "addr 2001:db8:0:2::30/64") {
				t.Errorf("the retry did not add the new fixed IP:\n%s", dump)
			}
		})
	}
}

// TestUpstream11Files applies interface files as an 11.0.0 agent wrote
// them (no if_type, no is_sriov): the VIP file's rules are applied, the
// member file (no rules) leaves them alone.
func TestUpstream11Files(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if err := r.k.EnsureNamespace(testNS); err != nil {
		t.Fatal(err)
	}
	r.k.AddLink(testNS, "eth1", vipMAC)
	r.k.AddLink(testNS, "eth2", memberMAC)
	dir := r.cfg.NetworkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"eth1.json": `{"name": "eth1", "addresses": [{"address": "203.0.113.4", "prefixlen": 24}, {"address": "203.0.113.10", "prefixlen": 32, "octavia_owned": true}], "routes": [{"dst": "203.0.113.0/24", "prefsrc": "203.0.113.10", "scope": "link", "table": 1}], "rules": [{"src": "203.0.113.10", "src_len": 32, "table": 1}], "scripts": {"up": [], "down": []}, "mtu": 1450}`,
		"eth2.json": `{"name": "eth2", "addresses": [{"address": "198.51.100.20", "prefixlen": 24}], "routes": [], "rules": [], "scripts": {"up": [], "down": []}}`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.n.Interfaces(ctx, "up", "all"); err != nil {
		t.Fatal(err)
	}
	dump := r.k.Dump()
	for _, want := range []string{"rule from 203.0.113.10/32 lookup 1", "route table 1 203.0.113.0/24 dev eth1 src 203.0.113.10", "addr 198.51.100.20/24", "mtu 1450 up"} {
		if !strings.Contains(dump, want) {
			t.Errorf("state lacks %q:\n%s", want, dump)
		}
	}
}

// TestRestore simulates a reboot: the namespace is gone and the NICs are
// back in the host under their boot names; Restore puts everything back.
func TestRestore(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	for _, s := range []step{{"vip", "203.0.113.10", vipBodyDual}, {"network", "", memberBody}} {
		if got := r.do(ctx, s); !strings.HasPrefix(got, "ok") {
			t.Fatal(got)
		}
	}
	want := r.k.Dump()

	// Reboot: a fresh kernel with the NICs in the host namespace.
	k2 := netnstest.NewKernel()
	k2.AddLink("", "eth0", "fa:16:3e:00:00:99")
	k2.AddLink("", "ens4", vipMAC)
	k2.AddLink("", "ens5", memberMAC)
	k2.AddLink("", "eth3", otherMAC) // never plugged: stays where it is
	n2 := NewNetwork(r.cfg, k2, zaptest.NewLogger(t))
	NoWaits(n2)
	if err := n2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	got := k2.Dump()
	// Interface indexes differ after a reboot; the dump shows names only.
	if got != want {
		t.Errorf("restored state differs\n--- got\n%s\n--- want (before the reboot)\n%s", got, want)
	}
	// Restore is idempotent.
	if err := n2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if again := k2.Dump(); again != got {
		t.Errorf("second restore changed the state\n%s", again)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "interfaces", "lo.json")); err != nil {
		t.Errorf("lo.json not written: %v", err)
	}
}

// dumpFiles renders the agent's files under dir, for golden files.
func dumpFiles(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(path)
		if strings.HasSuffix(path, ".json") {
			var pretty bytes.Buffer
			if json.Indent(&pretty, data, "", "  ") == nil {
				data = pretty.Bytes()
			}
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "file %s (%#o)\n%s\n", rel, info.Mode().Perm(), strings.TrimRight(string(data), "\n"))
		return nil
	})
	return b.String()
}

// TestScriptsRunWhenLinkComesUp: the agent's own restore (an agent
// restart) on a link already up leaves the up-scripts alone; the
// operator's `interface up` runs every one of them on each call, as
// upstream's amphora-interface since Octavia 14, and `down` runs the
// down-scripts.
func TestScriptsRunWhenLinkComesUp(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	scripts := func() []string {
		var runs []string
		for _, l := range r.k.Log() {
			if strings.Contains(l, "lvs-masquerade.sh") {
				runs = append(runs, strings.TrimPrefix(l, "run in "+testNS+": /usr/local/bin/lvs-masquerade.sh "))
			}
		}
		return runs
	}
	plugged := scripts()
	for range 2 {
		if err := r.n.Restore(ctx); err != nil {
			t.Fatalf("restore: %v", err)
		}
	}
	if got := scripts(); !slices.Equal(got, plugged) {
		t.Errorf("scripts run by the plug and two restores: %q, want only the plug's %q", got, plugged)
	}
	for _, action := range []string{"up", "up", "down", "up"} {
		if err := r.n.Interfaces(ctx, action, "eth1"); err != nil {
			t.Fatalf("interface %s: %v", action, err)
		}
	}
	want := append(plugged, "add ipv4 eth1", "add ipv4 eth1", "delete ipv4 eth1", "add ipv4 eth1")
	if got := scripts(); !slices.Equal(got, want) {
		t.Errorf("scripts run: %q, want %q", got, want)
	}
}

// TestInterfaceNameStaysInFolder: `interface up|down NAME` applies only a
// file of the interfaces folder that describes NAME. A name that reads as
// a path ("../x/evil") must not reach a file elsewhere and run its
// scripts; it is not found, as upstream, which looks names up among the
// folder's files.
func TestInterfaceNameStaysInFolder(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"vip", "203.0.113.10", vipBody4}); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	evil := `{"name": "eth1", "addresses": [], "routes": [], "rules": [],
	 "scripts": {"up": [{"command": "/evil/up-script"}], "down": [{"command": "/evil/down-script"}]}}`
	outside := filepath.Join(r.dir, "x")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "evil.json"), []byte(evil), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../x/evil", filepath.Join(outside, "evil"), "eth1.json", "", "."} {
		for _, action := range []string{"down", "up"} {
			err := r.n.Interfaces(ctx, action, name)
			if err == nil || !strings.Contains(err.Error(), "could not find interface") {
				t.Errorf("interface %s %q: %v, want could not find interface", action, name, err)
			}
		}
	}
	for _, l := range r.k.Log() {
		if strings.Contains(l, "/evil/") {
			t.Errorf("a file outside the interfaces folder was applied: %s", l)
		}
	}
	// The folder's own file is still found by its interface's name.
	if err := r.n.Interfaces(ctx, "down", "eth1"); err != nil {
		t.Errorf("interface down eth1: %v", err)
	}
}

// TestPluggedFileOneLinePerInterface: member ports plugged and detached
// again and again (each new port a new MAC, Nova's detach removing the
// NIC without a call) leave one line per interface in the
// plugged-interfaces file, the NIC that holds the name now; the file does
// not grow with every port ever plugged, and the restore after a reboot
// waits for no NIC that is gone for good.
func TestPluggedFileOneLinePerInterface(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	if got := r.do(ctx, step{"network", "", memberBody}); got != "ok: Plugged on interface eth2" {
		t.Fatal(got)
	}
	var last string
	for i := range 5 {
		mac := fmt.Sprintf("fa:16:3e:dd:00:%02x", i)
		r.k.AddLink("", fmt.Sprintf("ens%d", 10+i), mac)
		body := `{"mac_address": "` + mac + `", "fixed_ips": [{"ip_address": "203.0.113.130", "subnet_cidr": "203.0.113.128/25", "gateway": null, "host_routes": []}]}`
		if got := r.do(ctx, step{"network", "", body}); got != "ok: Plugged on interface eth3" {
			t.Fatalf("plug %d: %s", i, got)
		}
		last = mac
		if i < 4 {
			r.k.RemoveLink(testNS, "eth3") // detached
		}
	}
	data, err := os.ReadFile(r.cfg.PluggedFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := memberMAC + " eth2\n" + last + " eth3\n"; string(data) != want {
		t.Fatalf("plugged interfaces after 5 plugs and 4 detaches:\n%s\nwant\n%s", data, want)
	}

	// Reboot: both NICs back in the host namespace; none is missing.
	k2 := netnstest.NewKernel()
	k2.AddLink("", "ens4", memberMAC)
	k2.AddLink("", "ens5", last)
	n2 := NewNetwork(r.cfg, k2, zaptest.NewLogger(t))
	NoWaits(n2)
	if err := n2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	missing, err := n2.AdoptLatePorts(ctx, false)
	if err != nil || len(missing) != 0 {
		t.Fatalf("after the reboot: missing %v, %v", missing, err)
	}
}
