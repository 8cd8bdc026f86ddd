package health

import (
	"fmt"
	"testing"
	"time"
)

// held is how many keys l remembers.
func held(l *limiter) int { return len(l.keys) }

func TestLimiterRepeatedKey(t *testing.T) {
	l := limiter{every: time.Minute}
	t0 := time.Now()
	step := func(key string, at time.Duration, wantOK bool, wantN int) {
		t.Helper()
		if ok, n := l.allow(key, t0.Add(at)); ok != wantOK || n != wantN {
			t.Fatalf("allow(%q) at +%v = %v, %d; want %v, %d", key, at, ok, n, wantOK, wantN)
		}
	}
	step("a", 0, true, 0)
	step("a", time.Second, false, 0)
	step("a", 59*time.Second, false, 0)
	step("b", 59*time.Second, true, 0) // keys are limited apart
	step("a", time.Minute, true, 2)    // the period is over: the held-back count comes out
	step("a", time.Minute+time.Second, false, 0)
	l.reset("a")
	step("a", time.Minute+2*time.Second, true, 0)
}

// Keys carrying error text are unbounded in number; the limiter must not
// grow with them, and a key that keeps coming must stay limited meanwhile.
func TestLimiterBoundedKeys(t *testing.T) {
	l := limiter{every: time.Minute}
	t0 := time.Now()
	if ok, _ := l.allow("hot", t0); !ok {
		t.Fatal("first hot line held back")
	}
	const distinct = 10000
	for i := range distinct {
		now := t0.Add(time.Duration(i+1) * time.Millisecond)
		if ok, _ := l.allow(fmt.Sprintf("lvs:error %d", i), now); !ok {
			t.Fatalf("first line of key %d held back", i)
		}
		if ok, _ := l.allow("hot", now); ok {
			t.Fatalf("hot key let through again after %d other keys, within its period", i+1)
		}
		if n := held(&l); n > limiterKeys {
			t.Fatalf("after %d distinct keys the limiter holds %d, want at most %d", i+1, n, limiterKeys)
		}
	}
	if n := held(&l); n != limiterKeys {
		t.Errorf("limiter holds %d keys, want %d", n, limiterKeys)
	}
	if ok, n := l.allow("hot", t0.Add(time.Minute)); !ok || n != distinct {
		t.Errorf("hot key after its period = %v, %d; want true, %d", ok, n, distinct)
	}
}

// When full, keys that hold nothing back and whose period is over make room
// before a key whose count of held-back lines would be lost.
func TestLimiterEvictsIdleKeysFirst(t *testing.T) {
	l := limiter{every: time.Minute}
	t0 := time.Now()
	l.allow("busy", t0)
	l.allow("busy", t0.Add(time.Second)) // held back: count 1
	for i := range limiterKeys - 1 {
		l.allow(fmt.Sprintf("idle %d", i), t0.Add(2*time.Second))
	}
	later := t0.Add(3 * time.Minute)
	if ok, _ := l.allow("new", later); !ok {
		t.Fatal("new key held back")
	}
	if n := held(&l); n != 2 {
		t.Errorf("limiter holds %d keys, want 2 (busy, new)", n)
	}
	if ok, n := l.allow("busy", later); !ok || n != 1 {
		t.Errorf("busy = %v, %d; want true, 1 (its count kept)", ok, n)
	}
}
