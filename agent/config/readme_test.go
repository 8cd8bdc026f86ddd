package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsEveryOption keeps the README's option table true.
func TestREADMEListsEveryOption(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, o := range Options() {
		row := "| `[" + o.Section + "]` | `" + o.Key + "` |"
		if !strings.Contains(readme, row) {
			t.Errorf("README.md has no row for [%s] %s", o.Section, o.Key)
		}
	}
}
