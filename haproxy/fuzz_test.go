package haproxy

import (
	"math/big"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// seedConfig is shaped like a controller-rendered config.
const seedConfig = `# Configuration for loadbalancer lb1
global
    daemon
    maxconn 50000
    stats socket /var/lib/octavia/lb1.sock mode 0666 level user
defaults
    mode http
    option splice-request
frontend L1
    bind 203.0.113.10:443 ssl crt-list /var/lib/octavia/certs/lb1/L1.pem
    bind [2001:db8::10]:443,203.0.113.11:443
    bind 2001:db8::11:80 v4v6
    bind :::9003
    mode tcp
backend P1:L1
    server M1 198.51.100.5:80
peers lb1_peers
    peer x 203.0.113.4:1025
`

// FuzzParse: any config summarises without panicking; frontends are named
// and have an upper-case mode, TLS frontends name their crt-list, bind
// addresses are valid, specified and listed once; the file-descriptor
// estimate never wraps around; passing over lines by their first word
// changes nothing.
func FuzzParse(f *testing.F) {
	f.Add([]byte(seedConfig))
	f.Add([]byte("global\n maxconn 4000\n option splice-auto\n"))
	f.Add([]byte("frontend\nfrontend f\n bind ::ffff:198.51.100.1:80\n bind 0.0.0.0:80\n bind [::]:80\n mode Http\n"))
	f.Add([]byte("global\n\u00a0maxconn 4000\n\v\u2028frontend f\r\n  mode\u00a0tcp\n#bind 203.0.113.1:80\nbind\xff 203.0.113.2:80\n"))
	f.Fuzz(func(t *testing.T, cfg []byte) {
		sum := Parse(cfg)
		if every := parse(cfg, false); !reflect.DeepEqual(sum, every) {
			t.Fatalf("Parse = %+v; splitting every line: %+v", sum, every)
		}
		for _, fe := range sum.Frontends {
			if fe.Name == "" || strings.ContainsAny(fe.Name, " \t\n") || fe.Mode == "" || fe.Mode != strings.ToUpper(fe.Mode) {
				t.Fatalf("frontend %+v", fe)
			}
			if (fe.Mode == "TERMINATED_HTTPS") != (fe.CrtList != "") && fe.CrtList != "" {
				t.Fatalf("frontend %+v", fe)
			}
		}
		seen := map[string]bool{}
		for _, a := range sum.BindAddresses {
			if !a.IsValid() || a.IsUnspecified() || a.Is4In6() || seen[a.String()] {
				t.Fatalf("bind addresses %v", sum.BindAddresses)
			}
			seen[a.String()] = true
		}
		if sum.GlobalMaxconn > 0 {
			// At least two descriptors per connection, computed without
			// overflow.
			min := new(big.Int).Mul(big.NewInt(int64(sum.GlobalMaxconn)), big.NewInt(fdsPerConn))
			if got := new(big.Int).SetUint64(sum.FDsNeeded()); got.Cmp(min) < 0 {
				t.Fatalf("maxconn %d needs %v descriptors, FDsNeeded says %v", sum.GlobalMaxconn, min, got)
			}
		}
	})
}

// FuzzValidateID: an accepted id is exactly one path element below the
// folder it is joined to, never a separator, NUL, "." or "..".
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"4f2b7c5e-5a9e-4c1e-9d2a-0c6a1f3e8b7d", "lb_1", "..", ".", "a/b", "a\x00b", "-x", "vrrp", strings.Repeat("a", 129), "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateID("load balancer id", id) != nil {
			return
		}
		if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00\n") || strings.Contains(id, "..") || strings.HasPrefix(id, "-") {
			t.Fatalf("accepted %q", id)
		}
		base := "/var/lib/octavia"
		if p := filepath.Join(base, id); filepath.Dir(p) != base || filepath.Base(p) != id {
			t.Fatalf("%q joins to %q", id, p)
		}
	})
}
