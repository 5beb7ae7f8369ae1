package main

import (
	"os"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/devseed"
)

// TestREADMENamesTheDevAccount: the README names the account sbx dev
// seeds by its ID (it once said `dev`; the ID is acct-dev).
func TestREADMENamesTheDevAccount(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "seeds the account `" + devseed.AccountID + "`"; !strings.Contains(string(readme), want) {
		t.Errorf("README does not say %q", want)
	}
}
