package main

import (
	"io"
	"os"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli"
)

func main() {
	os.Exit(run(cli.ArgsFor(os.Args), os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if code, ok := cli.Run(args, stdout, stderr); ok {
		return code
	}
	if len(args) > 0 && args[0] == "help" {
		cli.Usage(stdout)
		return 0
	}
	return runAgent(args, stdout, stderr)
}
