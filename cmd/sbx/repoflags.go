package main

import (
	"bufio"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// repoTokenEnv names the environment variable create reads a repository
// token from when no --repo-token-file is given.
const repoTokenEnv = "SBX_REPO_TOKEN"

// repoFlags are create's repository flags. The token has no flag of its
// own on purpose: a flag's value shows in ps and in shell history.
type repoFlags struct {
	url, ref, tokenFile string
	depth               int
}

func (f *repoFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.url, "repo", "", "git repository (https://, http:// or git://) to clone into the workspace before ready")
	c.Flags().StringVar(&f.ref, "ref", "", "branch, tag or full commit ID of --repo (default: its default branch)")
	c.Flags().IntVar(&f.depth, "depth", 0, "clone only this many commits of --repo's history (default: all)")
	c.Flags().StringVar(&f.tokenFile, "repo-token-file", "", `file holding the token for a private --repo ("-": stdin; default: $`+repoTokenEnv+`)`)
}

// source is the create body's repo, nil without --repo.
func (f *repoFlags) source(c *cobra.Command, stdin io.Reader) (*apiclient.RepoSource, error) {
	if f.url == "" {
		for _, name := range []string{"ref", "depth", "repo-token-file"} {
			if c.Flags().Changed(name) {
				return nil, usageErrorf(c, "--%s needs --repo", name)
			}
		}
		return nil, nil
	}
	src := &apiclient.RepoSource{Url: f.url}
	if f.ref != "" {
		src.Ref = &f.ref
	}
	if c.Flags().Changed("depth") {
		if f.depth < 1 {
			return nil, usageErrorf(c, "--depth %d: want at least 1 commit (leave it out for the whole history)", f.depth)
		}
		src.Depth = &f.depth
	}
	tok, err := f.token(c, stdin)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		src.Token = &tok
	}
	return src, nil
}

// token reads the repository token: the first line of --repo-token-file
// (or stdin for "-"), else $SBX_REPO_TOKEN, else none.
func (f *repoFlags) token(c *cobra.Command, stdin io.Reader) (string, error) {
	if f.tokenFile == "" {
		return strings.TrimSpace(os.Getenv(repoTokenEnv)), nil
	}
	r := stdin
	if f.tokenFile != "-" {
		file, err := os.Open(f.tokenFile)
		if err != nil {
			return "", usageErrorf(c, "--repo-token-file: %v", err)
		}
		defer file.Close()
		r = file
	}
	line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", usageErrorf(c, "--repo-token-file %s: %v", f.tokenFile, err)
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", usageErrorf(c, "--repo-token-file %s holds no token", f.tokenFile)
	}
	return tok, nil
}
