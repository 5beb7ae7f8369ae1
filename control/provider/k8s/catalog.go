package k8s

import (
	"errors"
	"fmt"
	"os"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Platforms a profile can name.
const (
	PlatformLinux = "linux"
	PlatformMacOS = "macos"
)

// Catalog is the file operators keep next to the runner catalog: one pool
// per platform (where sandbox pods schedule) and the profiles (shapes)
// sandboxes are created from.
//
//	pools:
//	  linux:
//	    nodeSelector: {sbx.dev/pool: sandbox-linux}
//	    tolerations: [{key: sbx.dev/sandbox, operator: Exists, effect: NoSchedule}]
//	    storageClassName: fast-rwo
//	    volumeSnapshotClassName: fast-snap
//	    slots: 40
//	profiles:
//	- {name: tuist-linux-medium, platform: linux, cpu: 2, memoryMB: 4096, diskGB: 20,
//	   image: registry.example/sandbox-linux:2026.11, warmReplicas: 2}
type Catalog struct {
	Pools    map[string]Pool `json:"pools"`
	Profiles []Shape         `json:"profiles"`
	// DefaultProfile is what a create that names no profile gets (and
	// what GET /profiles marks default); empty: such a create is 422.
	DefaultProfile string `json:"defaultProfile,omitempty"`
}

// Pool is the dedicated sandbox node pool of one platform.
type Pool struct {
	// NodeSelector and Tolerations pin sandbox pods to the pool's nodes
	// and let them past the pool's taint, keeping CI capacity separate.
	NodeSelector map[string]string   `json:"nodeSelector"`
	Tolerations  []corev1.Toleration `json:"tolerations"`
	// StorageClassName backs workspace PVCs; empty uses the cluster default.
	StorageClassName string `json:"storageClassName,omitempty"`
	// VolumeSnapshotClassName is used for suspend snapshots (Linux only).
	VolumeSnapshotClassName string `json:"volumeSnapshotClassName,omitempty"`
	// RuntimeClassName selects the container runtime (e.g. the VM runtime
	// that boots macOS pods); empty keeps the node default.
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// Slots is how many sandbox pods the pool's hosts hold. It feeds the
	// capacity gauges; the operator raises it when hosts are added.
	Slots int `json:"slots"`
	// SlotsPerHost is how many sandbox pods one host of the pool holds;
	// the capacity alert divides a shortfall by it to propose how many
	// hosts to order. Zero means the default: 2 for macOS (Apple's
	// licence allows two macOS VMs per host), Slots for Linux (the pool
	// counted as one host).
	SlotsPerHost int `json:"slotsPerHost,omitempty"`
}

// MacOSVMsPerHost is the most macOS VMs Apple's licence allows on one host.
const MacOSVMsPerHost = 2

// HostSlots is SlotsPerHost with its default applied.
func (p Pool) HostSlots(platform string) int {
	switch {
	case p.SlotsPerHost > 0:
		return p.SlotsPerHost
	case platform == PlatformMacOS:
		return MacOSVMsPerHost
	default:
		return max(p.Slots, 1)
	}
}

// Shape is one profile: what a sandbox of that profile gets.
type Shape struct {
	Name     string  `json:"name"`
	Platform string  `json:"platform"`
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memoryMB"`
	DiskGB   int     `json:"diskGB"`
	Image    string  `json:"image"`
	// WarmReplicas is how many booted, unclaimed pods of this shape the
	// warm pool keeps.
	WarmReplicas int `json:"warmReplicas,omitempty"`
}

// LoadCatalog reads and validates a catalog file (YAML or JSON).
func LoadCatalog(path string) (Catalog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Catalog{}, fmt.Errorf("read catalog: %w", err)
	}
	c, err := ParseCatalog(b)
	if err != nil {
		return Catalog{}, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}

// ParseCatalog decodes a catalog strictly (unknown fields are errors) and
// validates it.
func ParseCatalog(b []byte) (Catalog, error) {
	var c Catalog
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Catalog{}, fmt.Errorf("parse: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Catalog{}, err
	}
	return c, nil
}

var profileNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

// Validate names the first bad field.
func (c Catalog) Validate() error {
	for name, p := range c.Pools {
		switch {
		case name != PlatformLinux && name != PlatformMacOS:
			return fmt.Errorf("pools.%s: platform must be %s or %s", name, PlatformLinux, PlatformMacOS)
		case p.Slots < 0 || p.SlotsPerHost < 0:
			return fmt.Errorf("pools.%s: slots and slotsPerHost must not be negative", name)
		case name == PlatformMacOS && p.SlotsPerHost > MacOSVMsPerHost:
			return fmt.Errorf("pools.%s.slotsPerHost %d: Apple's licence allows at most %d macOS VMs per host", name, p.SlotsPerHost, MacOSVMsPerHost)
		}
	}
	seen := map[string]bool{}
	for i, s := range c.Profiles {
		field := fmt.Sprintf("profiles[%d]", i)
		switch {
		case !profileNameRE.MatchString(s.Name):
			return fmt.Errorf("%s.name %q: want a DNS label of at most 40 characters", field, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("%s.name %q: duplicate", field, s.Name)
		case !hasPool(c, s.Platform):
			return fmt.Errorf("%s.platform %q: no pool for it", field, s.Platform)
		case s.CPU <= 0 || s.MemoryMB <= 0 || s.DiskGB <= 0:
			return fmt.Errorf("%s: cpu, memoryMB and diskGB must be positive", field)
		case s.Image == "":
			return fmt.Errorf("%s.image: required", field)
		case s.WarmReplicas < 0:
			return fmt.Errorf("%s.warmReplicas: must not be negative", field)
		}
		seen[s.Name] = true
	}
	if c.DefaultProfile != "" && !seen[c.DefaultProfile] {
		return fmt.Errorf("defaultProfile %q: no such profile", c.DefaultProfile)
	}
	if len(c.Profiles) == 0 {
		return errors.New("profiles: at least one is required")
	}
	return nil
}

func hasPool(c Catalog, platform string) bool { _, ok := c.Pools[platform]; return ok }

// Shape returns the named profile.
func (c Catalog) Shape(name string) (Shape, bool) {
	for _, s := range c.Profiles {
		if s.Name == name {
			return s, true
		}
	}
	return Shape{}, false
}
