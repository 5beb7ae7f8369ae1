package preview

import (
	"strings"
	"testing"
)

// TestPagesNameThePortLabel: the waking and error pages name a labelled
// port by its label, and an unlabelled one by its number only.
func TestPagesNameThePortLabel(t *testing.T) {
	for _, label := range []string{"storybook", ""} {
		var errPage, waking strings.Builder
		if err := errorPage.Execute(&errPage, pageFor(portClosedPage(6006), pageSubject{port: 6006, portLabel: label})); err != nil {
			t.Fatal(err)
		}
		if err := wakingPage.Execute(&waking, wakingData{Port: 6006, PortLabel: label, Status: wakeStatus{Step: stepRestoring}}); err != nil {
			t.Fatal(err)
		}
		for name, page := range map[string]string{"error": errPage.String(), "waking": waking.String()} {
			if got := strings.Contains(page, "<strong>storybook</strong>"); got != (label != "") {
				t.Errorf("%s page with label %q: names storybook %v, want %v", name, label, got, label != "")
			}
		}
	}
}
