//go:build e2e

package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/redistest"
)

// chromium returns the path of a Chromium on PATH; without one the test
// skips, unless SLUICE_REQUIRE_BROWSER=1 (set by .ci/run, which installs
// it), where it fails.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium on PATH and SLUICE_REQUIRE_BROWSER=1")
	}
	t.Skip("no Chromium on PATH: skipping (apt-get install chromium)")
	return ""
}

// shot saves a screenshot: into SLUICE_ARTIFACTS (or the test's temporary
// directory), and into SLUICE_UI_SCREENSHOTS as well when it is set (how
// docs/img's pictures of the page are made).
func shot(t *testing.T, name string, png []byte) {
	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	for _, d := range []string{dir, os.Getenv("SLUICE_UI_SCREENSHOTS")} {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
}

// The status page in a real headless Chromium, as a user goes through it:
// log in, see the policies, see a denied key appear after traffic, open it
// in the inspector, reset it after the browser's confirmation, and see the
// key allowed again.
func TestStatusPageInChromium(t *testing.T) {
	redistest.HourAhead()
	bin := chromium(t)
	r, admin := startUI(t, "policies: [{name: auth, limit: fixed_window 2/1h}, {name: orders, limit: 100/1m}]\n")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1200, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Accept the reset's confirmation dialog, from a goroutine of its own:
	// the page waits for it, and so does the click.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	text := func(sel chromedp.ID) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		shot(t, name, png)
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	do(chromedp.Navigate(admin+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "s3cret"),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("policies")))
	if p := text("policies"); !strings.Contains(p, "auth") || !strings.Contains(p, "orders") {
		t.Fatalf("the overview's policies: %q", p)
	}
	for range 5 {
		r.check(t, "auth", "mallory")
	}
	do(chromedp.Navigate(admin+"/ui/"), chromedp.WaitVisible(chromedp.ID("policies")))
	screenshot("ui-overview.png")
	do(chromedp.Navigate(admin+"/ui/policy/auth"), chromedp.WaitVisible(chromedp.ID("top")))
	if top := text("top"); !strings.Contains(top, "mallory") {
		t.Fatalf("the denied key is not listed: %q", top)
	}
	do(chromedp.Click(chromedp.CSS(`a[href*="key=mallory"]`)), chromedp.WaitVisible(chromedp.ID("state")))
	if st := text("state"); !strings.Contains(st, "false") {
		t.Fatalf("the inspector does not show the key limited: %q", st)
	}
	screenshot("ui-inspector.png")
	do(chromedp.Click(chromedp.ID("confirm")), chromedp.Click(chromedp.ID("reset")), chromedp.WaitVisible(chromedp.ID("flash")))
	if f := text("flash"); !strings.Contains(f, "Reset") {
		t.Fatalf("after the reset: %q", f)
	}
	if res, _ := r.check(t, "auth", "mallory"); !res.Allowed {
		t.Fatal("the key is still limited after the reset from the page")
	}
	do(chromedp.Navigate(admin+"/ui/sim?traffic=boundary&limit=10/1s&algorithms=fixed_window,sliding_log,gcra"),
		chromedp.WaitVisible(chromedp.CSS("svg")))
	screenshot("ui-simulator.png")
}
