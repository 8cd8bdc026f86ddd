package haproxy

import (
	"crypto/sha1"
	"encoding/base64"
	"strings"
)

// PeerName is the HAProxy peer name of an amphora: the controller renders
// the same name into the `peers` section of ACTIVE_STANDBY configs, so it
// must match bit for bit. SHA-1 of the id, standard Base64 with '+' and
// '/' swapped for '_' and '-' (not URL-safe Base64, whose mapping is the
// other way round), a leading '-' turned into 'x', padding dropped.
func PeerName(amphoraID string) string {
	sum := sha1.Sum([]byte(amphoraID))
	s := base64.StdEncoding.EncodeToString(sum[:])
	s = strings.NewReplacer("+", "_", "/", "-").Replace(s)
	if strings.HasPrefix(s, "-") {
		s = "x" + s[1:]
	}
	return strings.TrimRight(s, "=")
}
