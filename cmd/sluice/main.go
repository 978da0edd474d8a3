// Command sluice is the rate-limit service and gateway.
//
//	sluice serve            the service: HTTP JSON, Envoy RLS gRPC, metrics, admin
//	sluice proxy -upstream  a reverse proxy with the same policies
//	sluice check            send one check to a running service
//	sluice sim              compare the algorithms on simulated traffic
//	sluice config validate  check a policy file
//	sluice version
//
// Every flag has a SLUICE_* environment variable; `sluice CMD -h` lists them.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
		if len(args) < 2 || args[1] != "validate" {
			fmt.Fprintln(stderr, "usage: sluice config validate FILE")
			return 2
		}
		return validate(args[2:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "sluice", version)
		return 0
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `sluice: a rate limiter.

Commands:
  serve            run the rate-limit service (memory store and an embedded policy file by default)
  proxy            run a reverse proxy that applies the policies to an upstream
  check            send one check to a running service and print the decision
  sim              compare the algorithms on simulated traffic, with a chart
  config validate  check a policy file and list every problem
  version          print the version

Run 'sluice COMMAND -h' for a command's flags.
`)
}

// env returns the environment variable name, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// durationVar registers a duration flag whose default comes from the
// environment variable envName when it is set; a value there that does
// not parse is an error, as the same value given as the flag would be.
func durationVar(fs *flag.FlagSet, p *time.Duration, name, envName string, def time.Duration, usage string) error {
	*p = def
	if v, ok := os.LookupEnv(envName); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s=%q is not a duration, such as 10s", envName, v)
		}
		*p = d
	}
	fs.DurationVar(p, name, *p, usage)
	return nil
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
