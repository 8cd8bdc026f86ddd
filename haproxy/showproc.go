package haproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// procTable is the master's `show proc` answer.
type procTable struct {
	MasterPID int
	// FailedReloads counts reloads whose new config the master could not
	// load (it then keeps the old workers).
	FailedReloads int
	// Workers are the current generation's worker pids (not old workers
	// still draining connections).
	Workers []int
}

var failedCount = regexp.MustCompile(`\[failed:\s*(\d+)\]`)

// parseShowProc reads HAProxy 2.x `show proc` output:
//
//	#<PID>  <type>  <reloads>  <uptime>  <version>
//	458     master  2 [failed: 1]  0d00h10m19s  2.6.12
//	# workers
//	472     worker  1  0d00h10m18s  2.6.12
//	# old workers
//	...
func parseShowProc(out []byte) (procTable, error) {
	var t procTable
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
			t.MasterPID = pid
			if m := failedCount.FindStringSubmatch(line); m != nil {
				t.FailedReloads, _ = strconv.Atoi(m[1])
			}
		case fields[1] == "worker" && section == "workers":
			t.Workers = append(t.Workers, pid)
		}
	}
	if t.MasterPID == 0 {
		return t, fmt.Errorf("unexpected show proc answer: %q", out)
	}
	return t, nil
}

// showProc asks the master CLI. The master keeps CLI connections open
// after an answer, so the command ends with quit.
func showProc(ctx context.Context, masterSocket string) (procTable, error) {
	out, err := stats.Command(ctx, masterSocket, "show proc; quit")
	if err != nil {
		return procTable{}, err
	}
	return parseShowProc(out)
}

// ShowProcWorkers reads the current workers' pids from a master's
// `show proc` answer.
func ShowProcWorkers(out []byte) ([]int, error) {
	t, err := parseShowProc(out)
	return t.Workers, err
}
