package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// defaultSSHConfigDir is where sbx ssh-config writes Host entries unless
// --dir says otherwise, and where sbx destroy removes the sandbox's.
func defaultSSHConfigDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".ssh", "sbx")
}

// sshEntryFiles are the files sbx ssh-config writes for one alias.
func sshEntryFiles(dir, alias string) []string {
	key := filepath.Join(dir, alias+".key")
	return []string{filepath.Join(dir, alias+".conf"), key, key + ".lock"}
}

// removeSSHEntry removes the Host entry of sandbox id and its key, and
// reports whether there was one.
func removeSSHEntry(dir, id string) (bool, error) {
	alias := id
	if !strings.HasPrefix(alias, "sbx-") {
		alias = "sbx-" + alias
	}
	found := false
	for _, f := range sshEntryFiles(dir, alias) {
		err := os.Remove(f)
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, os.ErrNotExist):
			return found, fmt.Errorf("remove %s: %w", f, err)
		}
	}
	return found, nil
}

// sshEntry is one Host entry sbx ssh-config wrote, read from its header.
type sshEntry struct {
	id, api string
}

// readSSHEntry reads the header line writeSSHConfig puts first:
// "# Written by sbx ssh-config for sandbox ID on API.". A file without it
// is not ours and is left alone.
func readSSHEntry(path string) (sshEntry, bool) {
	f, err := os.Open(path)
	if err != nil {
		return sshEntry{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return sshEntry{}, false
	}
	rest, ok := strings.CutPrefix(sc.Text(), "# Written by sbx ssh-config for sandbox ")
	if !ok {
		return sshEntry{}, false
	}
	id, api, ok := strings.Cut(strings.TrimSuffix(rest, "."), " on ")
	if !ok || id == "" {
		return sshEntry{}, false
	}
	return sshEntry{id: id, api: api}, true
}

// pruneSSHEntries removes the entries in dir of sandboxes this API no
// longer has (not found, terminated or failed) and returns their IDs.
// Entries written for another API are kept: this one cannot tell.
func (a *app) pruneSSHEntries(ctx context.Context, dir string) (pruned, kept []string, err error) {
	cl, err := a.api()
	if err != nil {
		return nil, nil, err
	}
	confs, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		return nil, nil, err
	}
	for _, conf := range confs {
		e, ok := readSSHEntry(conf)
		if !ok || !sameAPI(e.api, a.apiURL()) {
			continue
		}
		sb, err := cl.sandbox(ctx, e.id)
		var pe *apiError
		gone := errors.As(err, &pe) && pe.Status == 404 ||
			err == nil && (sb.Status == "terminated" || sb.Status == "failed" || sb.Status == "terminating")
		if err != nil && !gone {
			return pruned, kept, fmt.Errorf("look up sandbox %s: %w", e.id, err)
		}
		if !gone {
			kept = append(kept, e.id)
			continue
		}
		if _, err := removeSSHEntry(dir, e.id); err != nil {
			return pruned, kept, err
		}
		pruned = append(pruned, e.id)
	}
	return pruned, kept, nil
}
