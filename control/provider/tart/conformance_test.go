package tart_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/providertest"
	"github.com/sbxedge/sbx/control/provider/tart"
)

// fakeTart is the fake tart binary, built once by TestMain.
var fakeTart string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faketart-")
	if err != nil {
		panic(err)
	}
	fakeTart = filepath.Join(dir, "tart")
	if out, err := exec.Command("go", "build", "-o", fakeTart, "github.com/sbxedge/sbx/internal/testkit/faketart").CombinedOutput(); err != nil {
		panic("build faketart: " + err.Error() + ": " + string(out))
	}
	// The host's macOS version, read beside tart (make faketart's link).
	if err := os.Symlink("tart", filepath.Join(dir, "sw_vers")); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const baseImage = "ghcr.io/cirruslabs/macos-sequoia-base:latest"

// fakeEnv is tart's environment for one test: its own TART_HOME and
// short delays.
func fakeEnv(t *testing.T) []string {
	return []string{
		"TART_HOME=" + t.TempDir(), "FAKETART_PULL_DELAY=50ms", "FAKETART_CLONE_DELAY=20ms",
		"FAKETART_BOOT_DELAY=300ms", "FAKETART_RESUME_DELAY=100ms", "FAKETART_STATE_SCALE=0.001",
	}
}

// newProvider is a one-host provider on the fake.
func newProvider(t *testing.T, cfg tart.Config) (*tart.Provider, *tart.CLI) {
	t.Helper()
	return newProviderWith(t, cfg, nil)
}

// newProviderWith is newProvider whose default host moves its suspended
// VMs to bundles in this process (sbx dev's way), when bundles is set.
func newProviderWith(t *testing.T, cfg tart.Config, bundles tart.BundleStore) (*tart.Provider, *tart.CLI) {
	t.Helper()
	cli := tart.NewCLI(fakeTart, fakeEnv(t), nil)
	if len(cfg.Hosts) == 0 {
		cfg.Hosts = []tart.Host{{Name: "mac-1", Driver: tart.WithBundles(cli, bundles)}}
	}
	if cfg.Templates == nil {
		cfg.Templates = map[string]tart.Template{"macos-test": {BaseImage: baseImage, SetupScript: "echo built > template.txt\n"}}
	}
	p, err := tart.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		stopAll(t, cli)
	})
	return p, cli
}

// stopAll stops every VM the test left running.
func stopAll(t *testing.T, d tart.Driver) {
	ctx := context.Background() // t.Context has ended by cleanup time
	vms, _ := d.List(ctx)
	for _, vm := range vms {
		if vm.Running {
			_ = d.Stop(ctx, vm.Name)
		}
	}
}

func macSpec(s provider.Spec) provider.Spec {
	s.Profile, s.Platform, s.CPU, s.MemoryMB = "macos-test", "macos", 2, 4096
	return s
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		p, _ := newProvider(t, tart.Config{Suspendable: true})
		return providertest.Env{Provider: p, Spec: macSpec}
	})
}

// TestConformanceWithOffload: suspend moves the VM's bundle off the host
// (the host's driver into a BundleStore) and frees it; restore brings it back and resumes.
func TestConformanceWithOffload(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		p, _ := newProviderWith(t, tart.Config{Suspendable: true}, tart.DirBundles{Dir: t.TempDir()})
		return providertest.Env{Provider: p, Spec: macSpec}
	})
}
