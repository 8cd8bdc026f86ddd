package cloud

import (
	"strings"
	"sync"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// errorsTB records what a boot reports to the test instead of failing it.
type errorsTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errors = append(e.errors, format)
}

// TestStartOffTestFatal: a vm.Start that fails with t.Fatalf on the boot
// goroutine returns that failure to the fabric (the server's fault) and
// fails the test, instead of ending the goroutine silently.
func TestStartOffTestFatal(t *testing.T) {
	rec := &errorsTB{TB: t}
	reached := false
	v, err := startOffTest(rec, func(tb testing.TB) *vm.VM {
		tb.Fatalf("qemu-img: %s", "no such image")
		reached = true
		return nil
	})
	if v != nil || err == nil || !strings.Contains(err.Error(), "qemu-img: no such image") {
		t.Fatalf("startOffTest = %v, %v; want the boot's failure", v, err)
	}
	if reached {
		t.Error("the boot went on after its Fatalf")
	}
	if len(rec.errors) != 1 {
		t.Errorf("the test was told %d times of the failure, want once: %q", len(rec.errors), rec.errors)
	}
}

// TestStartOffTestOK: a boot that succeeds returns its VM and no error.
func TestStartOffTestOK(t *testing.T) {
	want := &vm.VM{Name: "amphora-ok"}
	v, err := startOffTest(t, func(testing.TB) *vm.VM { return want })
	if v != want || err != nil {
		t.Fatalf("startOffTest = %v, %v; want the VM", v, err)
	}
}
