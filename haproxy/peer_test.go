package haproxy

import "testing"

func TestPeerName(t *testing.T) {
	for id, want := range map[string]string{
		"6f0e3a0c-2b1f-4d8e-9a57-3c1f0b7e2d11": "ew_a3kNPp_RVhPO8jhbGaGNySIM",
		"AMP1":                                 "quxbkjFfO2U3PaVHnExCdJYeHkA",
		"00000000-0000-0000-0000-000000000064": "xC19DVJPYsH2CtfDhTe91ykairA",
		"9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80": "gKgNP6rvBlLsqsp3uMm99B0Xycw",
	} {
		if got := PeerName(id); got != want {
			t.Errorf("PeerName(%q) = %q, want %q", id, got, want)
		}
	}
}
