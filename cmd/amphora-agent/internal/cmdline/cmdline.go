// Package cmdline gives the agent and each of its subcommands the same
// command-line contract, so that scripts and operators meet one
// behaviour: -h or --help prints the usage on stdout and exits 0,
// --version prints the version on stdout and exits 0, and an unknown flag
// or a bad flag value prints the error and the usage on stderr and exits
// 2. What a subcommand does with its other arguments is its own affair.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ExitUsage is the exit status of a command line the flags refuse.
const ExitUsage = 2

// Flags is a subcommand's flag set with the shared -h/--help and
// --version.
type Flags struct {
	*flag.FlagSet
	usage          string
	version        string
	stdout, stderr io.Writer
	showVersion    *bool
}

// New makes the flag set of command name; usage is the text printed
// before the options (its first line the synopsis), version what
// --version prints after the program's name.
func New(name, usage, version string, stdout, stderr io.Writer) *Flags {
	f := &Flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError),
		usage: strings.TrimRight(usage, "\n"), version: version, stdout: stdout, stderr: stderr}
	f.SetOutput(stderr)
	// Usage is printed by Parse itself, to the stream the case calls for.
	f.FlagSet.Usage = func() {}
	f.showVersion = f.Bool("version", false, "print the version and exit")
	return f
}

// Parse parses args. When exit is true the command is over (help or the
// version was printed, or the flags were refused) and should exit with
// code.
func (f *Flags) Parse(args []string) (code int, exit bool) {
	err := f.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.Usage(f.stdout)
		return 0, true
	case err != nil:
		// The flag package has printed what was wrong.
		f.Usage(f.stderr)
		return ExitUsage, true
	case *f.showVersion:
		fmt.Fprintln(f.stdout, "amphora-agent", f.version)
		return 0, true
	}
	return 0, false
}

// ParseNoArgs is Parse for a command that takes flags only: an argument
// left after the flags is refused like a bad flag, with the usage on
// stderr and ExitUsage.
func (f *Flags) ParseNoArgs(args []string) (code int, exit bool) {
	if code, exit := f.Parse(args); exit {
		return code, true
	}
	if f.NArg() > 0 {
		fmt.Fprintf(f.stderr, "%s: unexpected argument %q\n", f.Name(), f.Arg(0))
		f.Usage(f.stderr)
		return ExitUsage, true
	}
	return 0, false
}

// Usage prints the usage text and the options to w.
func (f *Flags) Usage(w io.Writer) {
	fmt.Fprintln(w, f.usage)
	fmt.Fprintln(w, "\noptions:")
	f.SetOutput(w)
	f.PrintDefaults()
	fmt.Fprintln(w, "  -h, -help\n    \tprint this help and exit")
	f.SetOutput(f.stderr)
}
