package preview_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// pageKind names the page on show: the card's data-page, or what the
// document is when it has no card.
const pageKind = `(() => { const c = document.querySelector("main.card"); return c ? (c.dataset.page || "card") : "no card: " + document.contentType })()`

// TestSignInErrorPathsInBrowser (issue 34): in Chromium, the dev sign-in
// form's two failure paths end on designed pages, never on problem JSON:
// submitting after the port was unexposed (the page was open meanwhile),
// and submitting a state the proxy never issued (a stale or forged form).
func TestSignInErrorPathsInBrowser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("leaving", "sbx-a", "acct-a", false, false)
	e.expose("staying", "sbx-a", "acct-a", false, false)
	ctx := chromiumtest.New(t, 60*time.Second)

	signInPage := func(label string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(e.url("", "/login?rd="+url.QueryEscape(e.url(label, "/"))))); err != nil {
			t.Fatalf("open the sign-in page for %s: %v", label, err)
		}
		if page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](pageKind)); page != "dev-sign-in" {
			body, _ := chromedp.Run(ctx, chromedp.Text("body"))
			t.Fatalf("the sign-in page for %s is %q: %q", label, page, body)
		}
	}
	// submit clicks the form's one button and returns the page it lands on.
	submit := func() (text, html string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("button#signin").click(), true`)); err != nil {
			t.Fatalf("submit: %v", err)
		}
		// The form posts and the browser lands on the answer.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](pageKind)); page != "dev-sign-in" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("still on the sign-in page 20 s after submitting it")
			}
		}
		text, _ = chromedp.Run(ctx, chromedp.Text("body"))
		html, _ = chromedp.Run(ctx, chromedp.OuterHTML("html"))
		return text, html
	}
	isDesigned := func(what, text, html string) {
		t.Helper()
		if strings.Contains(text, `"type":`) || strings.HasPrefix(strings.TrimSpace(text), "{") || !strings.Contains(html, "<style>") {
			t.Errorf("%s: not a designed page:\n%s", what, text)
		}
	}

	signInPage("leaving")
	e.res.remove("leaving") // unexposed while its sign-in page is open
	e.proxy.Invalidate("leaving")
	text, html := submit()
	isDesigned("submitting after the port was unexposed", text, html)
	if !strings.Contains(strings.ToLower(text), "port") {
		t.Errorf("submitting after the port was unexposed: the page does not speak of the port:\n%s", text)
	}

	signInPage("staying")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('input[name="state"]').value = "forged-state", true`)); err != nil {
		t.Fatal(err)
	}
	text, html = submit()
	isDesigned("submitting a state the proxy never issued", text, html)
	if strings.Contains(text, "hello from the sandbox") {
		t.Fatalf("a forged sign-in state reached the sandbox:\n%s", text)
	}
	chromiumtest.Screenshot(t, ctx, chromiumtest.ArtifactDir(t), "signin-bad-state")
}
