package haproxytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// Info is the answer to `show info`: key → value, both trimmed. Tests
// read it to see that an HAProxy answers, and how long it has run.
type Info map[string]string

// ShowInfo runs `show info` through the stats client's blocking engine
// (stats.Command). An answer without a `Key: value` line is an error.
func ShowInfo(ctx context.Context, socketPath string) (Info, error) {
	const cmd = "show info"
	out, err := stats.Command(ctx, socketPath, cmd)
	if err != nil {
		return nil, err
	}
	info := ParseInfo(out)
	if len(info) == 0 {
		err := stats.ErrEmpty
		if answer := bytes.TrimSpace(out); len(answer) > 0 {
			err = fmt.Errorf("unexpected answer %q", answer)
		}
		return nil, &stats.Error{Socket: socketPath, Command: cmd, Err: err}
	}
	return info, nil
}

// ParseInfo parses `Key: value` lines, splitting at the first colon and
// trimming both sides. Lines without a colon are skipped.
func ParseInfo(data []byte) Info {
	info := Info{}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k != "" {
			info[k] = strings.TrimSpace(v)
		}
	}
	return info
}

// UptimeSec is HAProxy's Uptime_sec, which tells whether the process just
// restarted.
func (i Info) UptimeSec() (int64, error) {
	v, ok := i["Uptime_sec"]
	if !ok {
		return 0, errors.New("show info: no Uptime_sec")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("show info: Uptime_sec = %q", v)
	}
	return n, nil
}
