package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/hosts"
)

// adminTemplates is `sbx admin templates list|prune`: the macOS templates
// on the Macs of control's hosts file (through each host's agent, with
// its token) or on sbx dev's own tart. It needs no database: templates
// live on the hosts.
func adminTemplates(ctx context.Context, verb string, args []string, out io.Writer, asJSON bool) error {
	fs := flag.NewFlagSet("sbx admin templates "+verb, flag.ContinueOnError)
	hostsFile := fs.String("macos-hosts", os.Getenv("SBX_MACOS_HOSTS"), "control's hosts file: the Macs and the macOS profiles' templates")
	tokenFile := fs.String("token-file", os.Getenv("SBX_INTERNAL_SECRET_FILE"), "with --macos-hosts: a file holding the agents' token, for hosts without a tokenFile (default: $SBX_INTERNAL_SECRET, control's internal-API secret)")
	tartPath := fs.String("tart", os.Getenv("SBX_TART"), "sbx dev's tart binary (its VMs in $TART_HOME or ~/.tart), instead of --macos-hosts")
	if err := parseAnywhere(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return adminUsageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	var p *tart.Provider
	var err error
	switch {
	case *hostsFile != "" && *tartPath != "":
		return adminUsageErr("templates: give --macos-hosts (control's Macs) or --tart (sbx dev's), not both")
	case *hostsFile != "":
		p, err = openHostsTemplates(*hostsFile, *tokenFile)
	case *tartPath != "":
		// sbx dev's profiles and templates: the same ones it builds.
		p, err = tart.New(tart.Config{Hosts: []tart.Host{{Name: "local", Driver: tart.NewCLI(*tartPath, nil, nil)}}, Templates: devseed.MacOSTemplates})
	default:
		return adminUsageErr("templates: name the Macs with --macos-hosts FILE (control's hosts file) or --tart PATH (sbx dev's tart)")
	}
	if err != nil {
		return err
	}
	defer p.Close()
	if verb == "prune" {
		deleted, err := p.PruneUnused(ctx)
		if asJSON {
			if deleted == nil {
				deleted = []string{}
			}
			if perr := printJSON(out, map[string]any{"deleted": deleted}); perr != nil {
				return perr
			}
		} else {
			for _, d := range deleted {
				fmt.Fprintln(out, "deleted", d)
			}
			if len(deleted) == 0 && err == nil {
				fmt.Fprintln(out, "no unused templates")
			}
		}
		return err
	}
	list, err := p.Templates(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		if list == nil {
			list = []tart.TemplateInfo{}
		}
		return printJSON(out, list)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tTEMPLATE\tIN_USE\tPROFILES\tBASE_IMAGE\tSCRIPT_SHA256\tSIZE_GB\tSTATE")
	for _, t := range list {
		script := t.ScriptSHA256
		if len(script) > 12 {
			script = script[:12]
		}
		inUse := "no"
		switch {
		case t.Building:
			inUse = "building"
		case t.Current:
			inUse = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", t.Host, t.Name, inUse, dash(strings.Join(t.Profiles, ",")), dash(t.BaseImage), dash(script), t.SizeGB, t.State)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// openHostsTemplates is a tart provider across the hosts file's Macs,
// for listing and pruning only (it places nothing).
func openHostsTemplates(file, tokenFile string) (*tart.Provider, error) {
	f, err := hosts.Load(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("--macos-hosts: %w", err)
		}
		return nil, adminUsageErr("--macos-hosts: " + err.Error())
	}
	token, err := flagenv.Secret("--token-file", tokenFile, os.Getenv("SBX_INTERNAL_SECRET"))
	if err != nil {
		return nil, err
	}
	cfg, err := f.Config(token, nil)
	if err != nil {
		return nil, err
	}
	return tart.New(cfg)
}
