package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Image is a built base image.
type Image struct {
	Dir    string
	Base   string // base.qcow2
	Kernel string // vmlinuz (the accelerator probe boots it)
	Initrd string // initrd.img
	Info   string // size and build time
}

type builtImage struct {
	once sync.Once
	img  Image
	err  error
}

var (
	imagesMu sync.Mutex
	images   = map[string]*builtImage{}
)

// Suite is the Debian release of the images build.sh makes for this run
// (AMPHORA_IMAGE_SUITE, as the Makefile's SUITE sets it; bookworm when
// unset, as build.sh defaults).
func Suite() string {
	if s := os.Getenv("AMPHORA_IMAGE_SUITE"); s != "" {
		return s
	}
	return "bookworm"
}

// BuildImage builds the base image once per test process (the script
// itself caches it by its inputs across runs).
func BuildImage(t testing.TB) Image {
	t.Helper()
	return BuildImageVariant(t, "")
}

// BuildImageVariant builds the image variant of build.sh
// (AMPHORA_IMAGE_VARIANT; "" is the base image), once per test process.
func BuildImageVariant(t testing.TB, variant string) Image {
	t.Helper()
	imagesMu.Lock()
	b := images[variant]
	if b == nil {
		b = &builtImage{}
		images[variant] = b
	}
	imagesMu.Unlock()
	b.once.Do(func() { b.img, b.err = buildImage(variant) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.img
}

func buildImage(variant string) (Image, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "packaging", "image", "build.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script)
	cmd.Env = append(os.Environ(), "AMPHORA_IMAGE_VARIANT="+variant)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("building the image %q: %v\n%s", variant, err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	info, _ := os.ReadFile(filepath.Join(dir, "build-info.txt"))
	return Image{Dir: dir, Base: filepath.Join(dir, "base.qcow2"), Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"), Info: strings.TrimSpace(string(info))}, nil
}

// Baked is the image bake.sh made (the package installed, no test hook):
// its disk with the kernel of the base it was made from (the accelerator
// probe's).
func Baked(t testing.TB, path string) Image {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	img := BuildImage(t)
	img.Base, img.Info = path, "baked: "+filepath.Base(path)
	return img
}

var (
	accelOnce sync.Once
	accel     string
)

// Accel is "kvm" when /dev/kvm runs a guest here, "tcg" otherwise. The
// probe boots the kernel without a root disk: under KVM it panics and
// QEMU exits within seconds; a KVM that hangs (as on some hosts) is
// killed and TCG used.
func Accel(img Image) string {
	accelOnce.Do(func() {
		accel = "tcg"
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "kvm", "-M", "pc", "-m", "256",
			"-nographic", "-no-reboot", "-kernel", img.Kernel, "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent")
		cmd.WaitDelay = time.Second
		// Only the panic counts: QEMU's exit status says nothing here.
		out, _ := cmd.CombinedOutput()
		if ctx.Err() == nil && strings.Contains(string(out), "Kernel panic") {
			accel = "kvm"
		}
	})
	return accel
}
