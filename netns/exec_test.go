package netns

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func TestStartInRunsTheChildInTheNamespace(t *testing.T) {
	testkit.RequireRoot(t, "creates a network namespace")
	name := fmt.Sprintf("aa-exec-%d", os.Getpid())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	// NewNamed switched this thread; put it back before anything else.
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.DeleteNamed(name) })

	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &st); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("readlink", "/proc/self/ns/net")
	var out strings.Builder
	cmd.Stdout = &out
	if err := StartIn(name, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), fmt.Sprintf("net:[%d]", st.Ino); got != want {
		t.Fatalf("child ran in %s, want %s", got, want)
	}
	now, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if !now.Equal(orig) {
		t.Fatal("the caller's thread was left in another namespace")
	}
}

func TestStartInMissingNamespace(t *testing.T) {
	if err := StartIn("aa-no-such-namespace", exec.Command("true")); err == nil {
		t.Fatal("started a child in a namespace that does not exist")
	}
}
