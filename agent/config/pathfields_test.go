package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
)

// Here rather than in configtest: the option table is test code of this
// package (options_test.go), which an external test of it can read.

// Every option of the table with an absolute default is a path field the
// guard checks, and only those: the guard cannot miss a path option.
func TestPathFieldsAreThePathOptions(t *testing.T) {
	var want int
	for _, o := range config.Options() {
		if strings.HasPrefix(o.Default, "/") {
			want++
		}
	}
	got := configtest.PathFields()
	if len(got) != want || want < 10 {
		t.Fatalf("path fields %v (%d); the option table has %d options with an absolute default", got, len(got), want)
	}
	typ := reflect.TypeOf(config.Config{})
	for name := range configtest.Commands {
		if _, ok := typ.FieldByName(name); !ok || !slices.Contains(got, name) {
			t.Errorf("command %s is not a path field of config.Config", name)
		}
	}
}
