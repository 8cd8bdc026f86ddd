package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilWaitsForTheCondition(t *testing.T) {
	var calls atomic.Int32
	if !Until(10*time.Second, func() bool { return calls.Add(1) == 3 }) {
		t.Fatal("a condition that came true was reported as timed out")
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestUntilGivesUpAtTheDeadline(t *testing.T) {
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never held was reported as met")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the deadline", d)
	}
}
