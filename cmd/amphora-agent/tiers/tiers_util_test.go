//go:build system || interop

package tiers_test

import (
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
)

// netTopology is the shared topology with the methods of the tests of
// this tier.
type netTopology struct{ tiersutil.NetTopology }

func newNetTopology(t *testing.T) netTopology {
	t.Helper()
	return netTopology{tiersutil.NewNetTopology(t)}
}
