package haproxy

import (
	"fmt"
	"regexp"
)

// idPattern admits the ids the controller sends (UUIDs) and anything else
// that is safe as one path element: no separators, no dot-only names.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ValidateID refuses ids that could escape base_path or base_cert_dir.
func ValidateID(kind, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("invalid %s %q: expected letters, digits, '-' or '_'", kind, id)
	}
	return nil
}
