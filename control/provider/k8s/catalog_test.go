package k8s_test

import (
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/provider/k8s"
)

func TestParseCatalog(t *testing.T) {
	t.Parallel()
	const pool = "pools: {linux: {nodeSelector: {a: b}, slots: 1}}\n"
	cases := []struct {
		name, yaml, wantErr string
	}{
		{"ok", pool + "profiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", ""},
		{"unknown field", pool + "profiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i, gpu: 1}]", "unknown field"},
		{"no pool for platform", pool + "profiles: [{name: p, platform: macos, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", "no pool"},
		{"bad platform", "pools: {windows: {}}\nprofiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", "platform must be"},
		{"bad name", pool + "profiles: [{name: P_1, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", "DNS label"},
		{"duplicate", pool + "profiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}, {name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", "duplicate"},
		{"no image", pool + "profiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1}]", "image"},
		{"zero cpu", pool + "profiles: [{name: p, platform: linux, memoryMB: 1, diskGB: 1, image: i}]", "positive"},
		{"negative warm", pool + "profiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i, warmReplicas: -1}]", "warmReplicas"},
		{"empty", pool, "at least one"},
		{"default", pool + "defaultProfile: p\nprofiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", ""},
		{"unknown default", pool + "defaultProfile: q\nprofiles: [{name: p, platform: linux, cpu: 1, memoryMB: 1, diskGB: 1, image: i}]", "defaultProfile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := k8s.ParseCatalog([]byte(c.yaml))
			if c.wantErr == "" && err != nil {
				t.Fatalf("ParseCatalog(%q): %v", c.yaml, err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("ParseCatalog(%q) = %v; want an error containing %q", c.yaml, err, c.wantErr)
			}
		})
	}
}
