package tick

import (
	"testing"
	"time"
)

func TestNextSharesInstants(t *testing.T) {
	const ph = 123 * time.Millisecond
	base := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		now   time.Duration // after base
		every time.Duration
		want  time.Duration // after base
	}{
		{0, time.Second, ph},
		{ph, time.Second, ph + time.Second}, // strictly after
		{ph - 1, time.Second, ph},
		{500 * time.Millisecond, time.Second, time.Second + ph},
		{500 * time.Millisecond, 10 * time.Second, 10*time.Second + ph},
		{3*time.Second + ph, 2 * time.Second, 4*time.Second + ph},
	} {
		got := next(base.Add(c.now), c.every, ph).Sub(base)
		if got != c.want {
			t.Errorf("next(+%v, %v) = +%v, want +%v", c.now, c.every, got, c.want)
		}
	}
	// A 10 s instant is a 1 s instant too.
	for now := base; now.Before(base.Add(30 * time.Second)); now = now.Add(700 * time.Millisecond) {
		ten := next(now, 10*time.Second, ph)
		if one := next(ten.Add(-time.Nanosecond), time.Second, ph); !one.Equal(ten) {
			t.Fatalf("10 s instant %v is not a 1 s instant (%v)", ten, one)
		}
	}
	if got := next(time.Unix(0, -1), time.Second, ph); got != time.Unix(0, int64(ph)) {
		t.Errorf("before the epoch: %v", got)
	}
}

func TestTickerTicksOnInstants(t *testing.T) {
	k := NewTicker(50 * time.Millisecond)
	defer k.Stop()
	for range 3 {
		select {
		case at := <-k.C:
			if off := (at.UnixNano() - int64(phase)) % int64(50*time.Millisecond); off > int64(40*time.Millisecond) {
				t.Fatalf("tick %v is %v past its instant", at, time.Duration(off))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no tick")
		}
		k.Next()
	}
}
