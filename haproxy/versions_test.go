package haproxy

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// The HAProxy releases whose output testdata/output holds (see its
// README): Debian bookworm's and Debian trixie's.
var capturedVersions = []string{"2.6.12", "3.0.11"}

// captured reads testdata/output/<name>_<version>.txt (testkit.ReadCapture).
func captured(t *testing.T, name, version string) (out []byte, exit int) {
	t.Helper()
	return testkit.ReadCapture(t, filepath.Join("testdata", "output", name+"_"+version+".txt"))
}

// haproxy -c as 2.6 and 3.0 answer it. Only the exit status decides: 3.0
// says nothing about a valid config (2.6 prints "Configuration file is
// valid", 3.0 only with -V), both exit 0 on a config with warnings and 1
// on an invalid or missing one, and a refusal is answered with HAProxy's
// own words.
func TestCheckOutputVersions(t *testing.T) {
	for _, version := range capturedVersions {
		for _, tc := range []struct {
			name  string
			valid bool
		}{
			{"check-valid", true},
			{"check-warning", true},
			{"check-invalid", false},
			{"check-missing", false},
		} {
			t.Run(tc.name+"_"+version, func(t *testing.T) {
				out, exit := captured(t, tc.name, version)
				if (exit == 0) != tc.valid {
					t.Fatalf("captured exit status %d", exit)
				}
				s, _ := newTestStore(t)
				s.Runner, s.HAProxyCmd = nil, testkit.Replaying(t, out, exit, false)
				err := s.Upload(context.Background(), "AMP1", "lb1", []byte("global\n    maxconn 1000\n"))
				if tc.valid {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				fe, ok := fault.As(err)
				if !ok || fe.Kind != fault.KindInvalid || fe.Details != string(out) {
					t.Fatalf("got %v, want a refusal with HAProxy's output:\n%s", err, out)
				}
				if got := explainOutput(string(out)); got != string(out) {
					t.Errorf("explained as %q", got)
				}
			})
		}
	}
}

// The alert of a master that may not open as many files as its config
// needs reads the same in 2.6 and 3.0, so explainOutput explains both.
func TestExplainOutputVersions(t *testing.T) {
	for _, version := range capturedVersions {
		out, _ := captured(t, "fd-limit", version)
		got := explainOutput(string(out))
		if !strings.Contains(got, "is allowed 20000 (RLIMIT_NOFILE)") || !strings.HasPrefix(got, string(out)) {
			t.Errorf("%s: %q", version, got)
		}
	}
}

// Every line a 2.6 or 3.0 master writes through a start, a reload, a
// reload whose config fails and a stop starts with its level, so each
// reaches the journal with its priority; the load's outcome is a notice
// ("Loading success.") or a warning ("Loading failure!") in both.
func TestPriorityVersions(t *testing.T) {
	for _, version := range capturedVersions {
		out, _ := captured(t, "master", version)
		counts := map[journal.Priority]int{}
		for line := range bytes.Lines(out) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			p := Priority(line)
			counts[p]++
			if p == journal.PriInfo {
				t.Errorf("%s: %q has no level", version, line)
			}
			switch {
			case bytes.Contains(line, []byte("Loading success.")) && p != journal.PriNotice,
				bytes.Contains(line, []byte("Loading failure!")) && p != journal.PriWarning:
				t.Errorf("%s: %q at priority %d", version, line, p)
			}
		}
		if counts[journal.PriErr] == 0 || counts[journal.PriWarning] == 0 || counts[journal.PriNotice] == 0 {
			t.Errorf("%s: priorities %v", version, counts)
		}
	}
}
