package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sbxedge/sbx/internal/objstore"
	"github.com/sbxedge/sbx/internal/objstore/s3test"
)

// The macOS suspend cycle the product spec gates macOS idle offload on:
// Tart has only full pause-copy-resume (no incremental memory snapshots
// in Virtualization.framework), so a suspend writes the whole memory
// image to disk, uploads it to object storage, and a wake downloads it
// and resumes. This harness times each phase across memory sizes,
// compression and transfer parallelism, and turns the numbers into the
// spec's feasibility recommendation.

func init() {
	commands = append(commands, command{
		name:    "macos-suspend",
		summary: "macOS pause-copy-resume cycle vs VM memory size (4/8/16 GB, scaled down here), compression and parallelism, against a real S3 server",
		run:     runMacSuspend,
	})
}

type macSuspendConfig struct {
	sizesGB     string
	scale       int
	compression string
	parallel    string
	partMiB     int
	runs        int
	zero, rand  float64
	dir         string
	endpoint    string
	bucket      string
	secure      bool
	weed        string
	wakeBudget  time.Duration
	sleepBudget time.Duration

	sizes []int
	comps []objstore.Compression
	pars  []int
}

func (c *macSuspendConfig) Validate() error {
	var err error
	if c.sizes, err = parseInts(c.sizesGB); err != nil || len(c.sizes) == 0 {
		return fmt.Errorf("-sizes %q: want GB counts like 4,8,16", c.sizesGB)
	}
	if c.pars, err = parseInts(c.parallel); err != nil || len(c.pars) == 0 || slices.ContainsFunc(c.pars, func(p int) bool { return p < 1 || p > 64 }) {
		return fmt.Errorf("-parallel %q: want counts in 1..64 like 1,4,8", c.parallel)
	}
	c.comps = nil
	for _, s := range strings.Split(c.compression, ",") {
		switch s {
		case "none":
			c.comps = append(c.comps, objstore.None)
		case "zstd":
			c.comps = append(c.comps, objstore.Zstd)
		default:
			return fmt.Errorf("-compression %q: want none, zstd or both", c.compression)
		}
	}
	switch {
	case c.scale < 1 || c.scale > 4096:
		return errors.New("-scale: want 1 (full size, a real Mac) .. 4096")
	case c.runs < 1 || c.runs > 20:
		return errors.New("-runs: want 1..20")
	case c.zero < 0 || c.rand < 0 || c.zero+c.rand > 1:
		return errors.New("-zero and -random are fractions summing to at most 1")
	case c.partMiB < 5 || c.partMiB > 512:
		return errors.New("-part-mib: want 5..512 (S3's smallest part is 5 MiB)")
	case c.wakeBudget <= 0 || c.sleepBudget <= 0:
		return errors.New("-wake-budget and -suspend-budget must be positive")
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// cycle is one measured pause-copy-resume.
type cycle struct {
	gb          int
	bytes       int64
	comp        objstore.Compression
	parallel    int
	pause       time.Duration // memory image written to local disk
	upload      time.Duration
	stored      int64
	download    time.Duration
	resume      time.Duration // memory image read back from local disk
	suspendTime time.Duration // pause + upload: until the slot is free
	wakeTime    time.Duration // download + resume: what a waiting user sees
}

func runMacSuspend(ctx context.Context, args []string) error {
	c := macSuspendConfig{}
	fs := flag.NewFlagSet("macos-suspend", flag.ContinueOnError)
	fs.StringVar(&c.sizesGB, "sizes", "4,8,16", "VM memory sizes in GB (the spec's 4/8/16)")
	fs.IntVar(&c.scale, "scale", 256, "divide each bundle by this (1 on a Mac mini with real storage; 256 here: 4 GB -> 16 MiB); the table states it and extrapolates linearly")
	fs.StringVar(&c.compression, "compression", "none,zstd", "none, zstd or both")
	fs.StringVar(&c.parallel, "parallel", "1,4,8", "transfer parallelism: multipart parts and ranged downloads in flight")
	fs.IntVar(&c.partMiB, "part-mib", 16, "multipart part and download range size in MiB")
	fs.IntVar(&c.runs, "runs", 1, "cycles per combination (the median is printed)")
	fs.Float64Var(&c.zero, "zero", 0.45, "fraction of zero pages in the bundle (guest memory never touched)")
	fs.Float64Var(&c.rand, "random", 0.25, "fraction of incompressible pages (media caches, encrypted data); the rest is compressible code and text")
	fs.StringVar(&c.dir, "dir", "", "local folder for bundles (default: a temp folder); on a Mac, the disk Tart keeps VMs on")
	fs.StringVar(&c.endpoint, "endpoint", "", "S3 endpoint host:port (default: start SeaweedFS's weed on loopback); keys from SBX_S3_ACCESS_KEY and SBX_S3_SECRET_KEY")
	fs.StringVar(&c.bucket, "bucket", "sbx-macos-suspend", "bucket for the bundles (with -endpoint)")
	fs.BoolVar(&c.secure, "https", false, "use HTTPS to -endpoint")
	fs.StringVar(&c.weed, "weed-bins", os.Getenv(s3test.EnvBins), "folder holding weed (default $"+s3test.EnvBins+", else make s3-bins' cache folder)")
	fs.DurationVar(&c.wakeBudget, "wake-budget", 60*time.Second, "longest acceptable wake (download + resume) at full size: a wake past it outlasts control's API hold and a user's patience")
	fs.DurationVar(&c.sleepBudget, "suspend-budget", 120*time.Second, "longest acceptable suspend (pause + upload) at full size: the VM is paused and its slot held meanwhile")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sbx-macos-suspend-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	store, where, stop, err := c.openStore(ctx, dir)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("macOS suspend cycle: bundles of %s GB divided by %d; %.0f%% zero pages, %.0f%% random, the rest compressible; %d MiB parts; object store: %s\n\n",
		c.sizesGB, c.scale, c.zero*100, c.rand*100, c.partMiB, where)

	var all []cycle
	for _, gb := range c.sizes {
		size := int64(gb) << 30 / int64(c.scale)
		src := filepath.Join(dir, fmt.Sprintf("vm-%dg.bundle", gb))
		for _, comp := range c.comps {
			for _, par := range c.pars {
				var runs []cycle
				for r := range c.runs {
					cy, err := c.oneCycle(ctx, store, src, size, gb, comp, par, uint64(r))
					if err != nil {
						return fmt.Errorf("%d GB %s x%d: %w", gb, compName(comp), par, err)
					}
					runs = append(runs, cy)
				}
				slices.SortFunc(runs, func(a, b cycle) int { return int(a.suspendTime + a.wakeTime - b.suspendTime - b.wakeTime) })
				all = append(all, runs[len(runs)/2])
			}
		}
	}
	printSuspendTable(os.Stdout, all, c.scale)
	fmt.Println()
	printRecommendation(os.Stdout, all, c)
	return nil
}

func compName(c objstore.Compression) string {
	if c == objstore.None {
		return "none"
	}
	return string(c)
}

// openStore connects to -endpoint, or starts weed on loopback.
func (c *macSuspendConfig) openStore(ctx context.Context, dir string) (*objstore.Store, string, func(), error) {
	part := int64(c.partMiB) << 20
	if c.endpoint != "" {
		ak, sk := os.Getenv("SBX_S3_ACCESS_KEY"), os.Getenv("SBX_S3_SECRET_KEY")
		st, err := objstore.New(objstore.Config{Endpoint: c.endpoint, Secure: c.secure, Bucket: c.bucket, AccessKey: ak, SecretKey: sk, PartSize: part})
		if err != nil {
			return nil, "", nil, err
		}
		if err := st.EnsureBucket(ctx); err != nil {
			return nil, "", nil, err
		}
		return st, c.endpoint, func() {}, nil
	}
	if c.weed == "" {
		// make s3-bins' cache folder, when the environment names none.
		if home, err := os.UserCacheDir(); err == nil {
			if m, _ := filepath.Glob(filepath.Join(home, "sbx", "s3-bins", "seaweedfs-*", "weed")); len(m) > 0 {
				c.weed = filepath.Dir(m[len(m)-1])
			}
		}
	}
	if c.weed != "" {
		os.Setenv(s3test.EnvBins, c.weed)
	}
	srv, err := s3test.Start(ctx, filepath.Join(dir, "s3"))
	if err != nil {
		return nil, "", nil, fmt.Errorf("start weed (run make s3-bins and pass -weed-bins, or -endpoint): %w", err)
	}
	cfg := srv.Config("sbx-macos-suspend")
	cfg.PartSize = part
	st, err := objstore.New(cfg)
	if err == nil {
		err = st.EnsureBucket(ctx)
	}
	if err != nil {
		srv.Stop()
		return nil, "", nil, err
	}
	return st, "SeaweedFS weed server -s3 on loopback " + srv.Endpoint + " (same disk, no network)", srv.Stop, nil
}

// oneCycle: pause (write the memory image), upload, drop the local copy,
// download, resume (read the image back), delete the object.
func (c *macSuspendConfig) oneCycle(ctx context.Context, st *objstore.Store, path string, size int64, gb int, comp objstore.Compression, par int, seed uint64) (cycle, error) {
	cy := cycle{gb: gb, bytes: size, comp: comp, parallel: par}
	key := fmt.Sprintf("suspend/%dg-%s-%d-%d", gb, compName(comp), par, seed)

	t := time.Now()
	if err := writeBundle(path, size, c.zero, c.rand, seed+uint64(gb)); err != nil {
		return cy, fmt.Errorf("pause: %w", err)
	}
	cy.pause = time.Since(t)

	t = time.Now()
	f, err := os.Open(path)
	if err != nil {
		return cy, err
	}
	cy.stored, err = st.Put(ctx, key, bufio.NewReaderSize(f, 1<<20), objstore.PutOptions{Compression: comp, Parallel: par})
	f.Close()
	if err != nil {
		return cy, fmt.Errorf("upload: %w", err)
	}
	cy.upload = time.Since(t)
	// The slot is free once the bundle is stored; the local copy goes.
	if err := os.Remove(path); err != nil {
		return cy, err
	}

	t = time.Now()
	out, err := os.Create(path)
	if err != nil {
		return cy, err
	}
	n, err := st.GetParallel(ctx, key, out, par)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return cy, fmt.Errorf("download: %w", err)
	}
	if n != size {
		return cy, fmt.Errorf("download: %d bytes back, want %d", n, size)
	}
	cy.download = time.Since(t)

	t = time.Now()
	if err := readBundle(path); err != nil {
		return cy, fmt.Errorf("resume: %w", err)
	}
	cy.resume = time.Since(t)
	cy.suspendTime, cy.wakeTime = cy.pause+cy.upload, cy.download+cy.resume
	if err := st.Delete(ctx, key); err != nil {
		return cy, err
	}
	return cy, os.Remove(path)
}

// writeBundle writes a memory image of size bytes in 4 KiB pages: zero
// pages, random pages and compressible pages (code-like text with small
// variations) in the given mix, fsynced as a hypervisor's save is.
func writeBundle(path string, size int64, zero, random float64, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	w := bufio.NewWriterSize(f, 1<<20)
	page := make([]byte, 4096)
	text := []byte("    movq %rsp, %rbp; call _objc_msgSend; // NSString *name = [bundle objectForInfoDictionaryKey:@\"CFBundleName\"];\n")
	for off := int64(0); off < size; off += 4096 {
		p := page[:min(4096, size-off)]
		switch x := r.Float64(); {
		case x < zero:
			clear(p)
		case x < zero+random:
			for i := 0; i+8 <= len(p); i += 8 {
				v := r.Uint64()
				for j := range 8 {
					p[i+j] = byte(v >> (8 * j))
				}
			}
		default:
			for i := 0; i < len(p); i += len(text) {
				copy(p[i:], text)
			}
			p[r.IntN(len(p))] = byte(r.Uint32())
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// readBundle reads the image back, as a resume maps it into the guest.
func readBundle(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

func printSuspendTable(w io.Writer, all []cycle, scale int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VM GB\tbundle MiB\tcompression\tparallel\tpause s\tupload s\tstored MiB\tratio\tdownload s\tresume s\tsuspend s\twake s\tcycle s\tMB/s\tfull-size cycle s\t")
	for _, cy := range all {
		total := cy.suspendTime + cy.wakeTime
		mbps := float64(cy.bytes) * 2 / 1e6 / (cy.upload + cy.download).Seconds()
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%.1f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t\n",
			cy.gb, cy.bytes>>20, compName(cy.comp), cy.parallel,
			secs(cy.pause), secs(cy.upload), float64(cy.stored)/(1<<20), float64(cy.stored)/float64(cy.bytes),
			secs(cy.download), secs(cy.resume), secs(cy.suspendTime), secs(cy.wakeTime), secs(total), mbps,
			total.Seconds()*float64(scale))
	}
	tw.Flush()
	if scale > 1 {
		fmt.Fprintf(w, "bundles are 1/%d of the VM's memory; \"full-size cycle\" multiplies by %d (linear: transfer-bound, fixed costs ignored).\n", scale, scale)
	}
}

// printRecommendation applies the budgets to the best combination per
// size, extrapolated to full size, and says whether macOS idle offload is
// worth shipping.
func printRecommendation(w io.Writer, all []cycle, c macSuspendConfig) {
	fmt.Fprintf(w, "Feasibility (budgets: suspend <= %s, wake <= %s at full size; the spec sets no number, these are flags):\n", c.sleepBudget, c.wakeBudget)
	feasible := map[int]bool{}
	for _, gb := range c.sizes {
		// The best setting is the one with the most room under both
		// budgets: the smaller of the two budget fractions it uses.
		fit := func(cy *cycle) float64 {
			return max(cy.suspendTime.Seconds()/c.sleepBudget.Seconds(), cy.wakeTime.Seconds()/c.wakeBudget.Seconds())
		}
		var best *cycle
		for i := range all {
			cy := &all[i]
			if cy.gb == gb && (best == nil || fit(cy) < fit(best)) {
				best = cy
			}
		}
		if best == nil {
			continue
		}
		sus := time.Duration(float64(best.suspendTime) * float64(c.scale))
		wake := time.Duration(float64(best.wakeTime) * float64(c.scale))
		ok := sus <= c.sleepBudget && wake <= c.wakeBudget
		feasible[gb] = ok
		verdict := "within budget"
		if !ok {
			verdict = "OVER budget"
		}
		fmt.Fprintf(w, "  %2d GB: best %s x%d: suspend %s, wake %s, %.0f%% of the bytes stored -> %s\n",
			gb, compName(best.comp), best.parallel, sus.Round(100*time.Millisecond), wake.Round(100*time.Millisecond),
			100*float64(best.stored)/float64(best.bytes), verdict)
	}
	var yes, no []string
	for _, gb := range c.sizes {
		if feasible[gb] {
			yes = append(yes, strconv.Itoa(gb)+" GB")
		} else {
			no = append(no, strconv.Itoa(gb)+" GB")
		}
	}
	switch {
	case len(no) == 0:
		fmt.Fprintf(w, "Recommendation: macOS idle offload is feasible at every size measured (%s); ship it behind the host's suspend support, with the best setting above.\n", strings.Join(yes, ", "))
	case len(yes) == 0:
		fmt.Fprintf(w, "Recommendation: defer macOS suspend/wake: no size measured fits the budgets; macOS sandboxes stay exempt from idle suspend, as the spec allows.\n")
	default:
		fmt.Fprintf(w, "Recommendation: offer macOS idle offload only for VMs of %s; keep %s exempt from idle suspend.\n", strings.Join(yes, ", "), strings.Join(no, ", "))
	}
	if c.scale > 1 || c.endpoint == "" {
		fmt.Fprintln(w, "These figures come from scaled bundles against a loopback SeaweedFS on this Linux machine: the decision needs a run with -scale 1 on a Mac mini against the real object store.")
	}
}
