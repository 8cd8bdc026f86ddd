package keepalived

import (
	"context"
	"regexp"
	"strconv"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// reloadKeepsMembers is the first keepalived release whose reload (SIGHUP)
// brings IPVS to what a restart would, for the changes Octavia makes to a
// listener, while keeping what its checks found. Two fixes were needed:
//   - 2.0.14 (commit f6e353da, "Fix real server checkers moving from
//     failed to OK on reload", keepalived issue #1163): before it, a
//     reload could leave a server marked failed with no failed check left
//     to bring it back, or put one back whose check had failed; since, the
//     failed checks of each server are counted again after the reload and
//     the server added to or removed from IPVS to match. This is the
//     version upstream Octavia's TODO waits for before it stops
//     restarting.
//   - 2.2.2 (commit 4127af50, "fix updating real server weights changed on
//     reload"): before it, a member's new weight reached keepalived but not
//     IPVS.
var reloadKeepsMembers = version{2, 2, 2}

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

// VersionOutput runs cmd --version and returns what it printed, through
// the one runner of short commands (its own process group, ended with it).
func VersionOutput(ctx context.Context, cmd string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	return procgroup.Exec{Env: procwatch.CleanEnv()}.CombinedOutput(ctx, cmd, "--version")
}
