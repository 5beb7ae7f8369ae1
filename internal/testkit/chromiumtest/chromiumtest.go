// Package chromiumtest starts Debian's real headless Chromium for tests and
// hands back a chromedp context to drive it. A missing browser fails the
// test: .ci/run installs the chromium package.
package chromiumtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
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

// ArtifactDir is where a test keeps files for people to look at
// (screenshots): $SBX_ARTIFACTS/<test name> when set, so they outlive the
// run, else a temporary directory. The path is logged.
func ArtifactDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if base := os.Getenv("SBX_ARTIFACTS"); base != "" {
		dir = filepath.Join(base, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("artifact dir: %v", err)
		}
	}
	t.Logf("artifacts in %s", dir)
	return dir
}

// Screenshot saves the tab's viewport as dir/name.png and returns the
// path.
func Screenshot(t *testing.T, ctx context.Context, dir, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	t.Logf("screenshot %s", p)
	return p
}

// Documents records every document (top-level page or frame) the tab
// loads from now on, as "<status> <url>", and returns a func reading
// them so far; reset empties the record.
func Documents(t *testing.T, ctx context.Context) (read func() []string, reset func()) {
	t.Helper()
	var mu sync.Mutex // guards docs: written from the tab's event loop
	var docs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if r, ok := ev.(*network.EventResponseReceived); ok && r.Type == network.ResourceTypeDocument {
			mu.Lock()
			docs = append(docs, fmt.Sprintf("%d %s", r.Response.Status, r.Response.URL))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen for documents: %v", err)
	}
	read = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), docs...)
	}
	reset = func() {
		mu.Lock()
		defer mu.Unlock()
		docs = nil
	}
	return read, reset
}
