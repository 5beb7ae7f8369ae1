package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// workspacePath checks a path argument: paths are relative to the
// workspace, and an absolute one is refused rather than silently taken
// as relative (/etc/x would otherwise land at <workspace>/etc/x).
func workspacePath(c *cobra.Command, p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return "", usageErrorf(c, "PATH %q is absolute; paths are relative to the sandbox's workspace (write %q for <workspace>/%s); files outside the workspace are reachable with sbx exec or sbx ssh",
			p, strings.TrimLeft(p, "/"), strings.TrimLeft(p, "/"))
	}
	// Cleaned here, where ".." can still be told apart: sent as the
	// last segment of a URL it would be resolved away, and "files/.."
	// would name the sandbox itself.
	clean := path.Clean(p)
	switch {
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return "", usageErrorf(c, "PATH %q leaves the workspace; paths are relative to the sandbox's workspace, and files outside it are reachable with sbx exec or sbx ssh", p)
	case clean == ".":
		return "", nil // the workspace's root
	}
	return clean, nil
}

// withFiles is the RunE of a files subcommand that takes PATH as its
// second argument (optional for ls: "" is the workspace): it checks PATH
// and builds a client that waits out a wake.
func (a *app) withFiles(run func(c *cobra.Command, gc *apiclient.ClientWithResponses, p string, got []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, got []string) error {
		p := ""
		if len(got) > 1 {
			var err error
			if p, err = workspacePath(c, got[1]); err != nil {
				return err
			}
		}
		gc, err := a.generated(wakeHold)
		if err != nil {
			return err
		}
		return run(c, gc, p, got)
	}
}

func newFilesCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "files",
		Short: "List, download, upload and delete files in the workspace",
		Long: `List, download, upload and delete files in the sandbox's workspace. PATH is
relative to the workspace; absolute paths are refused.`,
		Example: `  sbx files put $ID notes.txt ./notes.txt
  sbx files get $ID notes.txt -
  sbx files ls $ID
  sbx files rm --recursive $ID build`,
		Args: args(nil),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(newFilesLsCmd(a), newFilesGetCmd(a), newFilesPutCmd(a), newFilesRmCmd(a))
	return c
}

func newFilesLsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "ls ID [PATH]",
		Short:             "List a folder of the workspace (default: its root)",
		Example:           "  sbx files ls $ID\n  sbx files ls $ID docs -o json",
		Args:              args([]string{"ID"}, "PATH"),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withFiles(func(c *cobra.Command, gc *apiclient.ClientWithResponses, p string, got []string) error {
			resp, err := apiclient.Open(gc.ReadSandboxFile(c.Context(), got[0], p, nil))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				return fmt.Errorf("%s is a file: sbx files get %s %s", p, got[0], p)
			}
			var out struct {
				Entries []struct {
					Name    string    `json:"name"`
					Size    int64     `json:"size"`
					Mode    uint32    `json:"mode"`
					Type    string    `json:"type"`
					IsDir   bool      `json:"is_dir"`
					ModTime time.Time `json:"mod_time"`
				} `json:"entries"`
			}
			b, err := io.ReadAll(resp.Body)
			return a.renderAnswer(b, err, &out, func(w io.Writer) error {
				t := newTable(w, "MODE", "SIZE", "MODIFIED", "NAME")
				for _, e := range out.Entries {
					name := e.Name
					if e.IsDir {
						name += "/"
					}
					t.row(modeString(e.Type, e.Mode), e.Size, localTime(e.ModTime), name)
				}
				return t.flush()
			})
		}),
	}
}

func newFilesGetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID PATH [DEST]",
		Short:             "Download a file (DEST absent or -: stdout)",
		Example:           "  sbx files get $ID notes.txt ./notes.txt\n  sbx files get $ID notes.txt - | head",
		Args:              args([]string{"ID", "PATH"}, "DEST"),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withFiles(func(c *cobra.Command, gc *apiclient.ClientWithResponses, p string, got []string) error {
			prog := a.newProgress("downloading " + p)
			defer prog.Stop("")
			resp, err := apiclient.Open(gc.ReadSandboxFile(c.Context(), got[0], p, nil))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				return fmt.Errorf("%s is a folder: sbx files ls %s %s", p, got[0], p)
			}
			var dst io.Writer = a.out
			dest := ""
			if len(got) > 2 && got[2] != "-" {
				dest = got[2]
				f, err := os.Create(dest)
				if err != nil {
					return err
				}
				defer f.Close()
				dst = f
			}
			n, err := io.Copy(dst, &countingReader{r: resp.Body, p: prog, label: "downloading " + p, total: resp.ContentLength})
			if err != nil {
				return fmt.Errorf("download %s: %w", p, err)
			}
			if dest != "" {
				prog.Stop(fmt.Sprintf("downloaded %s to %s, %s", p, dest, sizeString(n)))
			}
			return nil
		}),
	}
}

func newFilesPutCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "put ID PATH [SRC]",
		Short: "Upload a file to PATH in the workspace (SRC absent or -: stdin)",
		Long: `Upload a file to PATH, relative to the workspace; folders on the way are
created. An absolute PATH is refused.`,
		Example:           "  sbx files put $ID notes.txt ./notes.txt\n  echo hi | sbx files put $ID hello.txt",
		Args:              args([]string{"ID", "PATH"}, "SRC"),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			p, err := workspacePath(c, got[1])
			if err != nil {
				return err
			}
			var src io.Reader = a.in
			size := int64(-1)
			if len(got) > 2 && got[2] != "-" {
				f, err := os.Open(got[2])
				if err != nil {
					return err
				}
				defer f.Close()
				if st, err := f.Stat(); err == nil {
					if st.IsDir() {
						return usageErrorf(c, "SRC %s is a folder; upload files one at a time (or tar them: tar c . | sbx exec ID -- tar x)", got[2])
					}
					size = st.Size()
				}
				src = f
			}
			gc, err := a.generated(wakeHold)
			if err != nil {
				return err
			}
			prog := a.newProgress("uploading " + p)
			defer prog.Stop("")
			// The body streams from SRC as it is sent, counted for the
			// progress line; a known size goes as Content-Length.
			body := &countingReader{r: src, p: prog, label: "uploading " + p, total: size}
			length := func(_ context.Context, req *http.Request) error {
				if size >= 0 {
					req.ContentLength = size
				}
				return nil
			}
			resp, err := apiclient.Open(gc.WriteSandboxFileWithBody(c.Context(), got[0], p, nil, "application/octet-stream", body, length))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var raw map[string]any
			if err := decodeRaw(&raw)(io.ReadAll(resp.Body)); err != nil {
				return err
			}
			prog.Stop(fmt.Sprintf("uploaded %s, %s", p, sizeString(body.n)))
			if a.output == "json" {
				return printJSON(a.out, raw)
			}
			return nil
		},
	}
}

func newFilesRmCmd(a *app) *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "rm ID PATH",
		Short: "Delete a file, or a folder with --recursive",
		Long: `Delete a file, or a folder with --recursive. Prints nothing on success;
with -o json, {"removed": PATH, "recursive": BOOL}.`,
		Example:           "  sbx files rm $ID notes.txt\n  sbx files rm --recursive $ID build",
		Args:              args([]string{"ID", "PATH"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withFiles(func(c *cobra.Command, gc *apiclient.ClientWithResponses, p string, got []string) error {
			var params apiclient.DeleteSandboxFileParams
			if recursive {
				params.Recursive = &recursive
			}
			resp, err := apiclient.Open(gc.DeleteSandboxFile(c.Context(), got[0], p, &params))
			if err != nil {
				var pe *apiError
				if errors.As(err, &pe) && pe.Code == "directory_not_empty" {
					return fmt.Errorf("%s is a folder that is not empty: sbx files rm --recursive %s %s", p, got[0], p)
				}
				return err
			}
			if err := resp.Body.Close(); err != nil {
				return err
			}
			// Silent on success as rm is; -o json still answers something a
			// script can parse.
			if a.output == "json" {
				return printJSON(a.out, map[string]any{"removed": p, "recursive": recursive})
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "delete a folder and everything in it")
	return c
}
