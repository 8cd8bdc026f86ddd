package cloud

import (
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// TestImageByTag: a server built with a flavor's image tag boots that
// variant; the default tag (and an empty one) boots the project's image.
func TestImageByTag(t *testing.T) {
	ours, upstream := vm.Image{Base: "ours.qcow2"}, vm.Image{Base: "upstream.qcow2"}
	o := AmphoraVMs{Image: ours, Variants: map[string]vm.Image{"upstream-agent": upstream}}
	for _, c := range []struct{ tag, base string }{
		{"amphora", "ours.qcow2"},
		{"", "ours.qcow2"},
		{"upstream-agent", "upstream.qcow2"},
	} {
		if img := o.image(c.tag); img.Base != c.base {
			t.Errorf("tag %q boots %s, want %s", c.tag, img.Base, c.base)
		}
	}
}
