//go:build e2e

package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
)

// sluice proxy's start line names its upstream without the userinfo,
// whether the URL came from -upstream or SLUICE_UPSTREAM: a password, or
// a token as the user name, shows nowhere in its output.
func TestProxyBannerHidesUpstreamUserinfo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte("policies: [{name: p, limit: 10/1m, match: /}]\n"), 0o644)
	const upstream = "http://tok3n-user:pa55word@127.0.0.1:1/base"
	for _, tt := range []struct {
		name string
		args []string
		env  []string
	}{
		{"-upstream", []string{"-upstream", upstream}, nil},
		{"SLUICE_UPSTREAM", nil, []string{"SLUICE_UPSTREAM=" + upstream}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := &logbuf.Buffer{}
			cmd := exec.Command(binary, append([]string{"proxy", "-config", file, "-listen", freeport.Addr(t), "-metrics", ""}, tt.args...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			waitFor(t, func() bool { return strings.Contains(out.String(), "forwarding to") })
			text := out.String()
			if strings.Contains(text, "pa55word") || strings.Contains(text, "tok3n-user") {
				t.Fatalf("the output shows the upstream's userinfo:\n%s", text)
			}
			if !strings.Contains(text, "forwarding to http://REDACTED@127.0.0.1:1/base") {
				t.Fatalf("the start line does not name the upstream:\n%s", text)
			}
		})
	}
}
