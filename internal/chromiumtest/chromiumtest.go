// Package chromiumtest starts Debian's real headless Chromium for tests and
// hands back a chromedp context to drive it. A missing browser fails the
// test: .ci/run installs the chromium package.
package chromiumtest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Binary is the browser the tests drive.
const Binary = "chromium"

// New starts a fresh browser (its own profile directory, so no cookie or
// cache leaks between tests) and returns a tab context that ends with the
// test or after limit.
func New(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	path, err := exec.LookPath(Binary)
	if err != nil {
		t.Fatalf("%s is required (apt-get install chromium): %v", Binary, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	ctx, cancelTimeout := context.WithTimeout(t.Context(), limit)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelTimeout()
	})
	// Start the browser now, so a broken install fails here and not in
	// the middle of a flow.
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("start %s: %v", Binary, err)
	}
	return tctx
}
