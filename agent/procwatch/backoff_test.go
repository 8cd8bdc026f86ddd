package procwatch

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Count: 2, Interval: 2 * time.Second, Max: 30 * time.Second, Stable: 30 * time.Second}
	var r Respawns
	var got []time.Duration
	// A crash loop: each process dies at once.
	for i := 0; i < 8; i++ {
		got = append(got, r.Next(b, 0))
	}
	want := []time.Duration{0, 0, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays = %v, want %v", got, want)
		}
	}
	// A process that ran long enough ends the streak.
	if d := r.Next(b, time.Minute); d != 0 || r.Streak() != 1 {
		t.Fatalf("after a stable run: delay %v, streak %d", d, r.Streak())
	}
	// respawn_count = 0 means every restart waits.
	var z Respawns
	if d := z.Next(Backoff{Count: 0, Interval: 0, Max: 30 * time.Second, Stable: time.Minute}, 0); d != time.Second {
		t.Fatalf("count 0: first delay %v, want 1s", d)
	}
}
