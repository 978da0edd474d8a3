package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// Every command answers -h with its usage on stdout or stderr and exit 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"serve", "-h"}, {"proxy", "-h"}, {"check", "-h"}, {"sim", "-h"},
		{"config", "-h"}, {"config", "validate", "-h"}, {"config", "defaults", "-h"}, {"version", "-h"}, {"completion", "-h"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String()+errb.String(), "usage") && !strings.Contains(out.String(), "Commands:") {
			t.Errorf("sluice %s: exit %d, %q %q; want its usage and 0", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"config", "defaults"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "store:\n  type: memory\n") {
		t.Errorf("sluice config defaults: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "sluice ") {
		t.Errorf("sluice version: exit %d, %q", code, out.String())
	}
	if code := run([]string{"version", "extra"}, &out, &errb); code != 2 {
		t.Errorf("sluice version extra: exit %d, want 2", code)
	}
}

// `sluice check` exits 2, never 0 or 1, on an answer that is not a
// decision: a page of HTML with 200, JSON of another shape, nothing.
func TestCheckRefusesWhatIsNotADecision(t *testing.T) {
	for _, body := range []string{"<html>hello</html>", `{"status":"ok"}`, "", `{"allowed":true}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		var out, errb bytes.Buffer
		code := check([]string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "-policy", "p", "-key", "k"}, &out, &errb)
		srv.Close()
		if code != 2 || !strings.Contains(errb.String(), "not a decision") {
			t.Errorf("answer %q: exit %d, stderr %q; want 2 and why", body, code, errb.String())
		}
	}
	// A real decision still reads: allowed is 0, denied 1.
	for body, want := range map[string]int{
		`{"allowed":true,"results":[{"allowed":true}]}`:   0,
		`{"allowed":false,"results":[{"allowed":false}]}`: 1,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		var out, errb bytes.Buffer
		code := check([]string{"-addr", strings.TrimPrefix(srv.URL, "http://"), "-policy", "p", "-key", "k"}, &out, &errb)
		srv.Close()
		if code != want {
			t.Errorf("answer %s: exit %d, want %d (%s)", body, code, want, errb.String())
		}
	}
}

// The banner's hint names the command the person ran: `go run` builds
// sluice in its cache, where `sluice` is not on the PATH.
func TestBannerHintForGoRun(t *testing.T) {
	for exe, want := range map[string]string{
		"/tmp/go-build3712/b001/exe/sluice": "go run ./cmd/sluice",
		"/usr/local/bin/sluice":             "sluice",
	} {
		if got := command(exe); got != want {
			t.Errorf("command(%q) = %q, want %q", exe, got, want)
		}
	}
}

// The banner's hint checks a policy the config has (default, as the
// README's, when there is one), or, for a file of envoyproxy/ratelimit
// domains alone, a descriptor of its first domain: a hint naming a policy
// that is not there answers 400.
func TestBannerHintNamesWhatTheConfigHas(t *testing.T) {
	for src, want := range map[string]string{
		"policies:\n  - {name: api, limit: 10/s}\n":                                                                 `"policy":"api"`,
		"domain: edge\ndescriptors:\n  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 5}}\n": `/json -d '{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"alice"}]}]}'`,
	} {
		cfg, err := config.Parse("t.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if got := tryIt(cfg, "127.0.0.1:8080", "sluice"); !strings.Contains(got, want) {
			t.Errorf("%s: hint %q; want it to hold %s", src, got, want)
		}
	}
	if got := tryIt(config.Default(), "127.0.0.1:8080", "sluice"); !strings.Contains(got, "-policy default") {
		t.Errorf("the default config's hint: %q", got)
	}
}

// `sluice config validate` accepts a policy forward-auth cannot fully
// apply, and says on stderr what it will not do: concurrency (the
// gateway never says when a request ends) and a cost read from the
// answer.
func TestValidateWarnsOfWhatForwardAuthCannotApply(t *testing.T) {
	file := t.TempDir() + "/sluice.yaml"
	if err := os.WriteFile(file, []byte(`policies:
  - {name: uploads, concurrency: 2, key: client_ip, match: "POST /upload"}
  - {name: tokens, limit: 1000/1h, cost: {estimate: 10, from: "json:usage.total_tokens"}, match: "/v1/"}
  - {name: checks, limit: 10/1h, concurrency: 1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"config", "validate", file}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok: 3 policies") {
		t.Fatalf("exit %d, %q %q; want ok", code, out.String(), errb.String())
	}
	for _, want := range []string{`warning: policy "uploads": forward-auth cannot hold concurrency 2`, `warning: policy "tokens": forward-auth never sees the upstream's answer`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q; want %q", errb.String(), want)
		}
	}
	if strings.Contains(errb.String(), `"checks"`) {
		t.Errorf("stderr %q: a policy without match is no gateway's, nothing to warn of", errb.String())
	}
}
