// Command sluice is the rate-limit service and gateway.
//
//	sluice serve            the service: HTTP JSON, Envoy RLS gRPC, metrics, admin
//	sluice proxy -upstream  a reverse proxy with the same policies
//	sluice check            send one check to a running service
//	sluice sim              compare the algorithms on simulated traffic
//	sluice config validate  check a policy file
//	sluice config defaults  print every default of the policy file
//	sluice version
//	sluice completion bash|zsh
//
// Every flag has an environment variable, SLUICE_ and its name in upper
// case with "_" for "-" (-shutdown-timeout: SLUICE_SHUTDOWN_TIMEOUT);
// `sluice CMD -h` lists them. The command line wins.
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/sluicehq/sluice/config"
	"io"
	"log/slog"
	"os"
	"strings"
	_ "time/tzdata" // calendar limits' zones, on hosts and images without /usr/share/zoneinfo

	"github.com/sluicehq/sluice/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "proxy":
		return proxyCmd(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "sim":
		return simCmd(args[1:], stdout, stderr)
	case "config":
		switch {
		case len(args) >= 2 && args[1] == "validate":
			return validate(args[2:], stdout, stderr)
		case len(args) == 2 && args[1] == "defaults":
			stdout.Write(config.Defaults())
			return 0
		case len(args) == 3 && args[1] == "defaults" && isHelp(args[2]):
			fmt.Fprintln(stdout, "usage: sluice config defaults\n\nPrints every default of the policy file: the value each field takes when a file leaves it out.")
			return 0
		case len(args) == 2 && isHelp(args[1]):
			fmt.Fprintln(stdout, validateUsage)
			return 0
		}
		fmt.Fprintln(stderr, validateUsage)
		return 2
	case "completion":
		return completion(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Fprintln(stdout, "usage: sluice version\n\nPrints the version, the commit it was built from and the Go version.")
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintln(stderr, "usage: sluice version")
			return 2
		}
		fmt.Fprintln(stdout, "sluice", buildinfo.Read())
		return 0
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprint(w, `sluice: a rate limiter.

Commands:
  serve            run the rate-limit service (memory store and an embedded policy file by default)
  proxy            run a reverse proxy that applies the policies to an upstream
  check            send one check to a running service and print the decision
  sim              compare the algorithms on simulated traffic, with a chart
  config validate  check a policy file and list every problem
  config defaults  print every default of the policy file
  version          print the version
  completion       print a shell completion script: bash or zsh

Run 'sluice COMMAND -h' for a command's flags.
`)
}

// env returns the environment variable name, or def.
// fail reports err for command cmd on w, prefixed once: "sluice sim:
// unknown algorithm", not "sluice sim: sluice: unknown algorithm".
func fail(w io.Writer, cmd string, err error) {
	msg := err.Error()
	for _, prefix := range []string{"sluice: ", "config: ", "sim: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	fmt.Fprintf(w, "sluice %s: %s\n", cmd, msg)
}

// envName is a flag's environment variable, by the one rule every flag
// follows: SLUICE_ and the flag's name in upper case, "-" as "_"
// (-shutdown-timeout: SLUICE_SHUTDOWN_TIMEOUT).
func envName(flag string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parseFlags sets each flag of fs from its environment variable (envName),
// then parses args over them, so that the command line wins; each flag's
// help names its variable. It returns the flags given on the command line
// and -1 to go on, or the exit code: 0 after -h, 2 for a bad flag or
// variable (said once, prefixed by the command).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (map[string]bool, int) {
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		f.Usage += " (env " + name + ")"
		if v, ok := os.LookupEnv(name); ok && bad == nil {
			if err := f.Value.Set(v); err != nil {
				bad = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if bad != nil {
		fmt.Fprintf(stderr, "sluice %s: %v\n", fs.Name(), bad)
		return nil, 2
	}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return nil, 0
	case err != nil:
		return nil, 2 // the flag package said why
	}
	cli := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		for _, a := range args {
			if n := strings.TrimLeft(a, "-"); a != n && (n == f.Name || strings.HasPrefix(n, f.Name+"=")) {
				cli[f.Name] = true
			}
		}
	})
	return cli, -1
}

func logger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}
