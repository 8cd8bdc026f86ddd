package keepalived

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// keepalived -t as 2.2 (Debian bookworm) and 2.3 (Debian trixie) answer
// the configs of testdata/check (see testdata/README), replayed through
// Test. The exit statuses are the same (0 clean, 5 faults found, 6 script
// security); 2.3 names the file on more of its lines (a virtual server
// without real servers) and words a VRRP instance without usable
// interface otherwise, which changes no verdict: unpaired braces refuse,
// other faults are complaints, lines about an included file are left out.
func TestKeepalivedTestVersions(t *testing.T) {
	for _, version := range []string{"2.2.7", "2.3.3"} {
		for _, tc := range []struct {
			name string
			want error // errUnpaired: refused for its braces
		}{
			{"vrrp_nocheck", nil},
			{"vrrp_octavia", nil}, // exit 6
			{"unknown_keyword", ErrComplaints},
			{"lvs_no_real_servers", ErrComplaints},
			{"braces_cut", errUnpaired},
			{"braces_extra", errUnpaired},
			{"include", ErrIncludesFiles},
		} {
			t.Run(tc.name+"_"+version, func(t *testing.T) {
				dir := t.TempDir()
				out, exit := capturedCheck(t, tc.name, version, dir)
				cfg := filepath.Join(dir, tc.name+".conf")
				text, err := Test(testkit.Replaying(t, out, exit, true), "")(context.Background(), cfg)
				switch {
				case tc.want == errUnpaired:
					var ee interface{ ExitCode() int }
					if !errors.As(err, &ee) || ee.ExitCode() != 5 || !unpairedBraces(text) {
						t.Fatalf("got %v, want a refusal for unpaired braces:\n%s", err, text)
					}
				case !errors.Is(err, tc.want) && err != tc.want:
					t.Fatalf("got %v, want %v:\n%s", err, tc.want, text)
				}
				if tc.want == ErrIncludesFiles {
					if strings.Contains(text, "secret-word") || !strings.Contains(text, "8 lines") {
						t.Fatalf("the included file's lines were not left out:\n%s", text)
					}
				} else if text != strings.TrimSpace(string(out)) {
					t.Fatalf("output %q, want keepalived's %q", text, out)
				}
			})
		}
	}
}

// errUnpaired marks the cases Test refuses with keepalived's exit status.
var errUnpaired = errors.New("unpaired braces")

// capturedCheck reads testdata/check/<name>_<version>.txt: "exit N",
// then what keepalived printed, with the folder the configs were in
// written CAPDIR (here dir).
func capturedCheck(t *testing.T, name, version, dir string) (out []byte, exit int) {
	t.Helper()
	out, exit = testkit.ReadCapture(t, filepath.Join("testdata", "check", name+"_"+version+".txt"))
	return bytes.ReplaceAll(out, []byte("CAPDIR"), []byte(dir)), exit
}
