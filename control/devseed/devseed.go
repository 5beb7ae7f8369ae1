// Package devseed gives `sbx dev` something to use on first start: the dev
// account, the Linux profiles and a bootstrap agent token.
package devseed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/store"
)

// AccountID is the dev account's ID.
const AccountID = "acct-dev"

// DefaultProfile is sbx dev's default profile: what `sbx create` without
// --profile gets. deploy/base/catalog.yaml holds the same profiles and
// default, so a command that works on sbx dev works on a cluster.
const DefaultProfile = "tuist-linux-small"

// Profiles seeded for development. The names follow the product spec;
// the platform comes from the name.
var Profiles = []store.Profile{
	{Name: "tuist-linux-small", Platform: "linux", CPU: 1, MemoryMB: 2048, DiskGB: 10, Image: "local"},
	{Name: "tuist-linux-medium", Platform: "linux", CPU: 2, MemoryMB: 4096, DiskGB: 20, Image: "local"},
	{Name: "tuist-linux-large", Platform: "linux", CPU: 4, MemoryMB: 8192, DiskGB: 40, Image: "local"},
}

// MacOSProfiles are seeded when sbx dev has a tart host (--tart): the
// same names as the catalog's macOS profiles. Their Image is the tart
// base image their template clones.
var MacOSProfiles = []store.Profile{
	{Name: "tuist-macos-16-large", Platform: "macos", CPU: 8, MemoryMB: 16384, DiskGB: 120, Image: "ghcr.io/cirruslabs/macos-sequoia-xcode:latest"},
}

// MacOSTemplates are the macOS profiles' setup scripts, run once per
// template through the guest (control/provider/tart).
var MacOSTemplates = map[string]tart.Template{
	"tuist-macos-16-large": {BaseImage: "ghcr.io/cirruslabs/macos-sequoia-xcode:latest", SetupScript: "mkdir -p \"$HOME/workspace\"\n"},
}

// SeedProfiles upserts profiles (sbx dev's macOS ones, with --tart). A
// dev run without --tart leaves them in the store; control does not
// offer them then (it serves no macOS, see lifecycle.Manager.Serves).
func SeedProfiles(ctx context.Context, st store.Store, profiles []store.Profile) error {
	err := st.InTx(ctx, func(tx store.Tx) error {
		for _, p := range profiles {
			if err := tx.UpsertProfile(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed profiles: %w", err)
	}
	return nil
}

// Seed creates the dev account (feature on, concurrency limit 10) and
// profiles, and makes sure secret is a valid agent token of the account.
// When secret is empty it reuses the one in tokenFile or mints a new one
// and writes it there (mode 0600); fresh reports whether it minted one, so
// the caller prints it once.
func Seed(ctx context.Context, st store.Store, secret, tokenFile string) (tok string, fresh bool, err error) {
	if secret == "" {
		if b, err := os.ReadFile(tokenFile); err == nil {
			secret = strings.TrimSpace(string(b))
		}
	}
	if secret == "" {
		secret, _ = token.New(token.PrefixAgent)
		fresh = true
	}
	if p, err := token.Parse(secret); err != nil || p != token.PrefixAgent {
		return "", false, fmt.Errorf("dev token must look like %s<43 base64url characters> (mint one with a fresh data dir)", token.PrefixAgent)
	}
	err = st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertAccount(ctx, store.Account{
			ID: AccountID, Name: "dev", SandboxesEnabled: true, ConcurrentLimit: 10, CreatedAt: time.Now().UTC(),
		}); err != nil {
			return err
		}
		for _, p := range Profiles {
			if err := tx.UpsertProfile(ctx, p); err != nil {
				return err
			}
		}
		err := tx.InsertToken(ctx, store.Token{
			ID: "tok-dev-" + fmt.Sprintf("%x", token.Hash(secret)[:6]), AccountID: AccountID, Kind: store.TokenAgent,
			Name: "sbx dev bootstrap", Hash: token.Hash(secret), CreatedAt: time.Now().UTC(),
		})
		if errors.Is(err, store.ErrConflict) {
			return nil // already seeded on an earlier start
		}
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("seed dev account: %w", err)
	}
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("write %s: %w", tokenFile, err)
	}
	return secret, fresh, nil
}
