package cli

import (
	"fmt"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// DefaultConfigFile is where the amphora image puts the controller's file.
const DefaultConfigFile = "/etc/octavia/amphora-agent.conf"

// ConfigFiles collects repeated --config-file flags, like oslo.config.
type ConfigFiles []string

func (c *ConfigFiles) String() string     { return strings.Join(*c, ",") }
func (c *ConfigFiles) Set(v string) error { *c = append(*c, v); return nil }

// LoadConfig reads and loads the --config-file list, the default file
// when it is empty.
func LoadConfig(files ConfigFiles) (ConfigFiles, *config.Config, []string, error) {
	if len(files) == 0 {
		files = ConfigFiles{DefaultConfigFile}
	}
	sources, err := config.ReadFiles(files)
	if err != nil {
		return files, nil, nil, err
	}
	cfg, warnings, err := config.Load(sources)
	if err != nil {
		return files, nil, nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return files, cfg, warnings, nil
}
