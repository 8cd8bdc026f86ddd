package netns

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// flakyDump is a netlink dump that the kernel marks as interrupted
// `interrupted` times (returning a partial result, as netlink does) before
// it answers consistently.
type flakyDump struct {
	interrupted int
	wrap        bool // wrap the interruption, as callers of nl may
	calls       int
}

func (f *flakyDump) dump() ([]string, error) {
	f.calls++
	if f.calls <= f.interrupted {
		err := error(netlink.ErrDumpInterrupted)
		if f.wrap {
			err = fmt.Errorf("link list: %w", err)
		}
		return []string{fmt.Sprintf("partial-%d", f.calls)}, err
	}
	return []string{"eth0", "eth1"}, nil
}

// TestRetryDumpInterruptedThenConsistent: an interrupted dump is repeated
// until one is consistent, and only the consistent result is returned.
func TestRetryDumpInterruptedThenConsistent(t *testing.T) {
	for n := 0; n < dumpAttempts; n++ {
		for _, wrap := range []bool{false, true} {
			t.Run(fmt.Sprintf("interrupted %d wrapped %v", n, wrap), func(t *testing.T) {
				f := &flakyDump{interrupted: n, wrap: wrap}
				got, err := retryDump(f.dump)
				if err != nil {
					t.Fatalf("error %v after %d interruptions (attempts allowed: %d)", err, n, dumpAttempts)
				}
				if len(got) != 2 || got[0] != "eth0" || got[1] != "eth1" {
					t.Errorf("result %q, want the consistent dump", got)
				}
				if f.calls != n+1 {
					t.Errorf("dump ran %d times, want %d", f.calls, n+1)
				}
			})
		}
	}
}

// TestRetryDumpAlwaysInterrupted: a dump that never settles is tried a
// bounded number of times and then reported as the interruption, so no
// plugging decision is taken on an inconsistent view.
func TestRetryDumpAlwaysInterrupted(t *testing.T) {
	f := &flakyDump{interrupted: 1 << 30}
	_, err := retryDump(f.dump)
	if !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Fatalf("error %v, want ErrDumpInterrupted", err)
	}
	if f.calls != dumpAttempts {
		t.Errorf("dump ran %d times, want %d", f.calls, dumpAttempts)
	}
	// One interruption too many is still a failure.
	f = &flakyDump{interrupted: dumpAttempts}
	if _, err := retryDump(f.dump); !errors.Is(err, netlink.ErrDumpInterrupted) || f.calls != dumpAttempts {
		t.Errorf("%d interruptions: error %v after %d calls, want ErrDumpInterrupted after %d", dumpAttempts, err, f.calls, dumpAttempts)
	}
}

// TestRetryDumpOtherError: any other error is returned at once, not
// retried.
func TestRetryDumpOtherError(t *testing.T) {
	calls := 0
	_, err := retryDump(func() ([]string, error) {
		calls++
		return nil, unix.EPERM
	})
	if !errors.Is(err, unix.EPERM) || calls != 1 {
		t.Errorf("error %v after %d calls, want EPERM after 1", err, calls)
	}
}
