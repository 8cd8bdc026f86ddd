package cloud

import (
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// TestImageByTag: a server built with a flavor's image tag boots that
// variant without the package under test; the default tag (and an empty
// one) boots the project's image with its package.
func TestImageByTag(t *testing.T) {
	ours, upstream := vm.Image{Base: "ours.qcow2"}, vm.Image{Base: "upstream.qcow2"}
	o := AmphoraVMs{Image: ours, Package: "agent.deb", Variants: map[string]vm.Image{"upstream-agent": upstream}}
	for _, c := range []struct {
		tag, base, pkg string
	}{
		{"amphora", "ours.qcow2", "agent.deb"},
		{"", "ours.qcow2", "agent.deb"},
		{"upstream-agent", "upstream.qcow2", ""},
	} {
		img, pkg := o.image(c.tag)
		if img.Base != c.base || pkg != c.pkg {
			t.Errorf("tag %q boots %s with package %q, want %s with %q", c.tag, img.Base, pkg, c.base, c.pkg)
		}
	}
}
