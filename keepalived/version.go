package keepalived

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// reloadKeepsCheckers is the first keepalived release whose reload (SIGHUP)
// leaves each real server in or out of IPVS as its carried-over checks
// say. Before it, a reload could keep a server marked failed with no
// failed check left to ever bring it back, or put one back in whose check
// had failed (keepalived issue #1163). Commit f6e353da ("Fix real server
// checkers moving from failed to OK on reload", in 2.0.14) recounts the
// failed checks of each server after the reload and adds or removes it
// from IPVS to match. Upstream Octavia restarts the UDP/SCTP listeners'
// keepalived on every reload until that version is common.
var reloadKeepsCheckers = version{2, 0, 14}

// version is a keepalived release: major, minor, patch.
type version [3]int

func (v version) atLeast(w version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] > w[i]
		}
	}
	return true
}

func (v version) String() string {
	return strconv.Itoa(v[0]) + "." + strconv.Itoa(v[1]) + "." + strconv.Itoa(v[2])
}

// banner is the first line keepalived --version prints (on stderr):
// "Keepalived v2.2.7 (01/16,2022)", maybe followed by a git commit.
var banner = regexp.MustCompile(`(?m)^Keepalived v(\d+)\.(\d+)\.(\d+)\b`)

// parseVersion reads the release from keepalived --version's output.
func parseVersion(out []byte) (v version, ok bool) {
	m := banner.FindSubmatch(out)
	if m == nil {
		return v, false
	}
	for i := range v {
		n, err := strconv.Atoi(string(m[i+1]))
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// versionTimeout bounds keepalived --version; a binary that hangs must
// not hold a controller's reload.
const versionTimeout = 5 * time.Second

// VersionOutput runs cmd --version and returns what it printed.
func VersionOutput(ctx context.Context, cmd string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, cmd, "--version")
	c.Env = procwatch.CleanEnv()
	// A wrapper's children may hold the pipe after it is killed.
	c.WaitDelay = time.Second
	return c.CombinedOutput()
}
