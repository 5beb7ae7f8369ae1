package main

import (
	"strings"
	"testing"
	"time"
)

func TestScaleConfigBounds(t *testing.T) {
	t.Parallel()
	ok := func() scaleConfig {
		return scaleConfig{Sandboxes: 4000, Sessions: intList{1000, 5000, 9000}, WebSockets: 5500, Duration: time.Minute,
			CreateConns: 16, Accounts: 1, Traffic: 15 * time.Second, PrevConns: 64, PrevDur: 5 * time.Second, PrevRounds: 3,
			Timeout: 40 * time.Minute, BinDir: "/tmp/bin"}
	}
	if err := func() *scaleConfig { c := ok(); return &c }().Validate(); err != nil {
		t.Fatalf("the full run's flags: %v", err)
	}
	if err := func() *scaleConfig {
		c := ok()
		c.Only = []string{"creates", "keepalive"}
		c.KeepAlive = 10000
		return &c
	}().Validate(); err != nil {
		t.Fatalf("the keep-alive run's flags: %v", err)
	}
	if err := func() *scaleConfig {
		c := ok()
		c.Only, c.Accounts = []string{"creates"}, 16
		return &c
	}().Validate(); err != nil {
		t.Fatalf("the many-tenant create run's flags: %v", err)
	}
	for name, bad := range map[string]func(*scaleConfig){
		"falling sessions":      func(c *scaleConfig) { c.Sessions = intList{5000, 1000} },
		"too many sessions":     func(c *scaleConfig) { c.Sessions = intList{20000} },
		"unbounded create":      func(c *scaleConfig) { c.Duration = time.Hour },
		"no binaries":           func(c *scaleConfig) { c.BinDir = "" },
		"no sandboxes":          func(c *scaleConfig) { c.Sandboxes = 0 },
		"unbounded run":         func(c *scaleConfig) { c.Timeout = 0 },
		"unknown step":          func(c *scaleConfig) { c.Only = []string{"creates", "nonsense"} },
		"past 128 a sandbox":    func(c *scaleConfig) { c.Sandboxes = 40; c.Sessions = intList{9500} },
		"too many keep-alives":  func(c *scaleConfig) { c.KeepAlive = 20000 },
		"no account":            func(c *scaleConfig) { c.Accounts = 0 },
		"accounts past creates": func(c *scaleConfig) { c.Accounts = 4 },
	} {
		c := ok()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate passed; want a bound refused", name)
		}
	}
	var l intList
	if err := l.Set("1000, 5000,10000"); err != nil || l.String() != "1000,5000,10000" {
		t.Errorf("intList: %v %v", l, err)
	}
	if err := l.Set("1k"); err == nil {
		t.Error("intList took 1k")
	}
}

func TestPrintTableIsMarkdown(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printScaleTable(&b, []scaleRow{{"a", "≤ 1", "2", miss, "why"}})
	want := "| row | target | measured | pass/miss | note |\n|---|---|---|---|---|\n| a | ≤ 1 | 2 | miss | why |\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
