package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// hostProbe watches the macOS host the soak runs on: kernel panic reports
// and vm_stat. On any other OS each probe says it is not available rather
// than inventing a figure.
type hostProbe struct {
	goos     string
	panicDir string
}

func newHostProbe(panicDir string) *hostProbe {
	return &hostProbe{goos: runtime.GOOS, panicDir: panicDir}
}

func (h *hostProbe) describe() string {
	if h.goos != "darwin" {
		return runtime.GOOS + "/" + runtime.GOARCH + " (not macOS: panic and vm_stat probes not available on this host)"
	}
	out, _ := exec.Command("sw_vers", "-productVersion").Output()
	return "macOS " + strings.TrimSpace(string(out)) + " " + runtime.GOARCH
}

// panicReports lists the Kernel* reports macOS writes after a panic, or
// nil where there is no such folder.
func (h *hostProbe) panicReports() map[string]bool {
	if h.goos != "darwin" {
		return nil
	}
	entries, err := os.ReadDir(h.panicDir)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "Kernel") {
			out[e.Name()] = true
		}
	}
	return out
}

// memoryInUse is the fraction of host memory active, wired or held by
// the compressor, from vm_stat; -1 and a note where vm_stat is missing.
func (h *hostProbe) memoryInUse(ctx context.Context) (float64, string) {
	if h.goos != "darwin" {
		return -1, "vm_stat not available on this host"
	}
	out, err := exec.CommandContext(ctx, "vm_stat").Output()
	if err != nil {
		return -1, "vm_stat failed: " + err.Error()
	}
	f, err := parseVMStat(string(out))
	if err != nil {
		return -1, err.Error()
	}
	return f, ""
}

var vmStatLine = regexp.MustCompile(`^(Pages [^:]+|Pages occupied by compressor):\s+(\d+)\.?$`)

// parseVMStat turns vm_stat's page counts into the in-use fraction:
// (active + wired + compressor) / (free + active + inactive + speculative
// + wired + compressor).
func parseVMStat(out string) (float64, error) {
	pages := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := vmStatLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		n, _ := strconv.ParseFloat(m[2], 64)
		pages[m[1]] = n
	}
	used := pages["Pages active"] + pages["Pages wired down"] + pages["Pages occupied by compressor"]
	total := used + pages["Pages free"] + pages["Pages inactive"] + pages["Pages speculative"]
	if total == 0 {
		return -1, fmt.Errorf("vm_stat: no page counts in %q", out)
	}
	return used / total, nil
}

// previewGet fetches / from the guest's port 8080 at `tart ip`, as the
// preview proxy would.
func previewGet(ctx context.Context, tart, name string) error {
	ip, err := tartCmd(ctx, tart, "ip", name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(strings.TrimSpace(ip), "8080")+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("preview: %s", resp.Status)
	}
	return nil
}
