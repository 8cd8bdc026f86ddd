// Package etag computes the digest the API returns for uploaded files.
package etag

import (
	"crypto/md5"
	"encoding/hex"
)

// MD5 is data's md5 in lower-case hex: upstream's ETag and md5sum form,
// which the controller compares against its own.
func MD5(data []byte) string {
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}
