package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsEveryOption keeps the option table of this package's
// README.md true: every option the agent reads has its row there.
func TestREADMEListsEveryOption(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, o := range Options() {
		row := "| `[" + o.Section + "]` | `" + o.Key + "` |"
		if !strings.Contains(readme, row) {
			t.Errorf("agent/config/README.md has no row for [%s] %s", o.Section, o.Key)
		}
	}
}
