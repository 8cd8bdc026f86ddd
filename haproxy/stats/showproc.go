package stats

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Proc is a master's `show proc` answer.
type Proc struct {
	MasterPID int
	// Reloads counts the master's re-executions, failed ones included.
	Reloads int
	// FailedReloads counts the reloads whose new config the master could
	// not load (it then keeps the old workers) since the last one it
	// loaded: a successful load puts it back to 0 (HAProxy 2.6 and 3.0).
	FailedReloads int
	// Workers are the current generation's worker pids (not old workers
	// still draining connections).
	Workers []int
}

var failedCount = regexp.MustCompile(`\[failed:\s*(\d+)\]`)

// ParseShowProc reads `show proc` output, the same in HAProxy 2.x and 3.0:
//
//	#<PID>  <type>  <reloads>  <uptime>  <version>
//	458     master  2 [failed: 1]  0d00h10m19s  2.6.12
//	# workers
//	472     worker  1  0d00h10m18s  2.6.12
//	# old workers
//	...
func ParseShowProc(out []byte) (Proc, error) {
	var p Proc
	section := "master"
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#<PID>"):
			continue
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 0 {
			// Not a process line: pids are positive.
			continue
		}
		switch {
		case fields[1] == "master":
			p.MasterPID = pid
			if len(fields) > 2 {
				p.Reloads, _ = strconv.Atoi(fields[2])
			}
			if m := failedCount.FindStringSubmatch(line); m != nil {
				p.FailedReloads, _ = strconv.Atoi(m[1])
			}
		case fields[1] == "worker" && section == "workers":
			p.Workers = append(p.Workers, pid)
		}
	}
	if p.MasterPID == 0 {
		return p, fmt.Errorf("unexpected show proc answer: %q", out)
	}
	return p, nil
}

// ShowProc asks a master CLI for its process list. The master keeps CLI
// connections open after an answer, so the command ends with quit.
func ShowProc(ctx context.Context, masterSocket string) (Proc, error) {
	out, err := Command(ctx, masterSocket, "show proc; quit")
	if err != nil {
		return Proc{}, err
	}
	return ParseShowProc(out)
}

// Bounds of one attempt of ShowProcAgain.
const (
	firstProcAttempt = time.Second
	maxProcAttempt   = 8 * time.Second
)

// ShowProcAgain is ShowProc for a master that may be reloading: an
// attempt that gets no answer within its window is given up and made
// again on a new connection, the window growing from 1 s to 8 s, until
// ctx ends. A master re-executing for a reload can accept a connection
// in the image it replaces and then never answer it, while it answers a
// new connection at once (HAProxy 2.6, seen in back-to-back reloads); a
// master starved of CPU answers late, which the growing window allows.
func ShowProcAgain(ctx context.Context, masterSocket string) (Proc, error) {
	window := firstProcAttempt
	for {
		actx, cancel := context.WithTimeout(ctx, window)
		p, err := ShowProc(actx, masterSocket)
		cancel()
		if err == nil || ctx.Err() != nil || !Timeout(err) {
			return p, err
		}
		window = min(2*window, maxProcAttempt)
	}
}
