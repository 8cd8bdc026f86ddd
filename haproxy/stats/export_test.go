package stats

import (
	"errors"
	"fmt"
	"strconv"
)

// Exported for tests only (and for package stats_test).

// Has reports whether the answer had a column called name.
func (r Row) Has(name string) bool {
	_, ok := r.h.cols[name]
	return ok
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
