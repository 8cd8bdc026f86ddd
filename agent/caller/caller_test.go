package caller

import (
	"context"
	"testing"
)

// The client's context survives detaching, and its end shows through it.
func TestCallerSurvivesDetaching(t *testing.T) {
	req, hangUp := context.WithCancel(context.Background())
	detached := context.WithoutCancel(With(req))
	c, ok := Of(detached)
	if !ok {
		t.Fatal("no caller after detaching")
	}
	hangUp()
	if c.Err() == nil || detached.Err() != nil {
		t.Fatalf("caller %v, detached %v", c.Err(), detached.Err())
	}
	if _, ok := Of(Without(detached)); ok {
		t.Fatal("Without left a caller")
	}
	if _, ok := Of(context.Background()); ok || Or(detached) != c {
		t.Fatal("Of or Or wrong")
	}
}
