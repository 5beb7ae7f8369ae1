package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/control/accounts"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/invalidation"
)

const adminUsage = `sbx admin: manage accounts, projects and tokens on the control database

Usage:
  sbx admin [--database-url URL | --data-dir DIR] [--redis-url URL] COMMAND [-o json]

Commands:
  account create [--name N] [--limit N] [--disabled] [--platforms P,..] [--monthly-minutes M] [--snapshot-limit N] ID
  account set [--name N] [--enabled=BOOL] [--limit N] [--platforms P,..|none] [--monthly-minutes M] [--snapshot-limit N] [--idle-timeout D] ID
  account show ID
  account list
  project create --account ID --name NAME [--id UUID]     prints the project ID
  token mint --account ID [--name NAME] [--kind agent|project]   prints the secret once
  token revoke TOKEN_ID
  templates list  [--macos-hosts FILE [--token-file F] | --tart PATH]   macOS templates per host
  templates prune [--macos-hosts FILE [--token-file F] | --tart PATH]   delete stopped ones no profile builds

Examples:
  sbx admin account create --name Hive --limit 3 --platforms linux acct-hive
  sbx admin account set --enabled=false acct-hive
  sbx admin account list -o json
  TOKEN=$(sbx admin token mint --account acct-dev --name ci)
  sbx admin --data-dir /tmp/sbx account list
  sbx admin templates list --macos-hosts /etc/sbx/macos-hosts.yaml -o json
  sbx admin templates prune --tart bin/tart

It works on the database directly (SBX_DATABASE_URL, or the SQLite file in
--data-dir), with the same store code and migrations as control, so it
runs whether or not control is up. Changes apply to the next request:
account rules are read inside each create's transaction. A revoked
token's open previews and streams end at once when --redis-url names the
Redis the edges hear, else within control's next check of the database.

The templates commands need no database: they ask each Mac's host agent
(control's --macos-hosts file; the agents' token from --token-file, else
$SBX_INTERNAL_SECRET) or sbx dev's tart. A template is in use while a
profile builds it (its base image and setup script); prune never deletes
one in use, nor a build in progress, and sandboxes cloned from a pruned
template keep running (each clone is its own copy).
`

// runAdmin is `sbx admin`. Operators hold the database credentials
// already; a separate admin API would add a credential to guard and a
// network surface for the same power, and would not work while control is
// down.
func runAdmin(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sbx admin", flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("SBX_DATABASE_URL"), "Postgres URL (default: the SQLite database in --data-dir)")
	dataDir := fs.String("data-dir", defaultDataDir(), "sbx dev data dir holding sbx.db, when no --database-url")
	redisURL := fs.String("redis-url", "", "Redis URL the edge hears invalidations on (default: $SBX_REDIS_URL): a token revocation is published there at once")
	fs.Usage = func() { fmt.Fprint(fs.Output(), adminUsage) }
	if !helpRequested(args) {
		// The flag package would print its error and the usage; a
		// mistake gets the CLI's one line instead (below).
		fs.SetOutput(io.Discard)
	}
	args, output, err := takeOutput(args)
	if err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return adminUsageErr(err.Error())
	}
	if helpRequested(fs.Args()) {
		// Help needs no database.
		fs.Usage()
		return nil
	}
	args = fs.Args()
	if len(args) < 2 {
		return &usageError{cmd: "sbx admin", msg: "want a noun and a verb, e.g. `account create`"}
	}
	// The command is checked before the database is opened: a typo is
	// told as a typo, not as a missing database.
	noun, verb, rest := args[0], args[1], args[2:]
	if !slices.Contains(adminCommands, noun+" "+verb) {
		return &usageError{cmd: "sbx admin", msg: fmt.Sprintf("unknown command %q; want one of: %s", noun+" "+verb, strings.Join(adminCommands, ", "))}
	}
	if noun == "templates" {
		return adminTemplates(ctx, verb, rest, out, output == "json")
	}
	st, err := openAdminStore(ctx, *dbURL, *dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	publish, closeRedis, err := adminPublisher(cmp.Or(*redisURL, os.Getenv("SBX_REDIS_URL")))
	if err != nil {
		return err
	}
	defer closeRedis()
	a := &admin{st: st, acc: accounts.New(st, publish, time.Now), out: out, json: output == "json"}
	return explainNotFound(a.run(ctx, noun+" "+verb, rest))
}

func (a *admin) run(ctx context.Context, cmd string, rest []string) error {
	switch cmd {
	case "account create":
		return a.accountCreate(ctx, rest)
	case "account set":
		return a.accountSet(ctx, rest)
	case "account show":
		return a.accountShow(ctx, rest)
	case "account list":
		return a.accountList(ctx)
	case "project create":
		return a.projectCreate(ctx, rest)
	case "token mint":
		return a.tokenMint(ctx, rest)
	case "token revoke":
		return a.tokenRevoke(ctx, rest)
	}
	return fmt.Errorf("admin: %q is listed but not handled", cmd)
}

// adminUsageErr is a usage mistake in an admin command (exit 2).
func adminUsageErr(msg string) error { return &usageError{cmd: "sbx admin", msg: msg} }

// notFoundError is a named thing that does not exist (exit 5), worded
// for the person who named it.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// explainNotFound words the store's "account X: not found" for the
// operator who typed X, and says where the IDs are listed.
func explainNotFound(err error) error {
	var nf *notFoundError
	if err == nil || errors.As(err, &nf) || !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return &notFoundError{msg: err.Error() + " (`sbx admin account list` lists the accounts)"}
}

// adminCommands are the noun-verb pairs runAdmin handles.
var adminCommands = []string{"account create", "account set", "account show", "account list",
	"project create", "token mint", "token revoke", "templates list", "templates prune"}

// adminPublisher publishes invalidations on the Redis at url; none when
// url is empty.
func adminPublisher(url string) (accounts.Publish, func(), error) {
	if url == "" {
		return nil, func() {}, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		// The URL may hold a password: name the flag, not the value.
		return nil, nil, adminUsageErr("--redis-url: not a Redis URL")
	}
	rdb := redis.NewClient(opts)
	return func(ctx context.Context, inv edgeapi.Invalidation) error {
		return invalidation.Publish(ctx, rdb, inv)
	}, func() { rdb.Close() }, nil
}

func openAdminStore(ctx context.Context, dbURL, dataDir string) (store.Store, error) {
	if dbURL != "" {
		return postgres.Open(ctx, dbURL, nil)
	}
	path := filepath.Join(dataDir, "sbx.db")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("admin: no database at %s (give --database-url, or --data-dir of an sbx dev that ran once): %w", path, err)
	}
	return sqlite.Open(ctx, path, nil)
}

// admin parses and prints; accounts does the work, in process on the
// database (see runAdmin). A revocation is published on Redis when given
// one, reaching every edge at once; without, it reaches them through
// control's watch of revoked tokens (control/previewwatch.go), which is
// also how a running sbx dev on SQLite, with no channel to this process,
// hears of it.
type admin struct {
	st   store.Store // reads
	acc  *accounts.Service
	out  io.Writer
	json bool // -o json
}

// accountFlags are the settable fields; set tracks which were given, so
// `account set` changes only those.
type accountFlags struct {
	fs        *flag.FlagSet
	name      string
	limit     int
	enabled   bool
	platforms string
	minutes   int
	snapshots int
	idle      time.Duration
}

func newAccountFlags(cmd string) *accountFlags {
	f := &accountFlags{fs: flag.NewFlagSet("sbx admin account "+cmd, flag.ContinueOnError)}
	f.fs.StringVar(&f.name, "name", "", "display name (unique; default: the ID)")
	f.fs.IntVar(&f.limit, "limit", 1, "sandbox_concurrent_limit: live sandboxes (pending, ready, suspending, restoring) at once")
	f.fs.BoolVar(&f.enabled, "enabled", true, "the sandboxes feature flag")
	f.fs.StringVar(&f.platforms, "platforms", "", `platform allowlist, comma-separated ("none" or empty: every platform)`)
	f.fs.IntVar(&f.minutes, "monthly-minutes", 0, "sandbox_monthly_minutes soft cap (0: none); shown in usage and metrics, blocks nothing")
	f.fs.IntVar(&f.snapshots, "snapshot-limit", 0, "snapshots (creating or ready) the account may keep at once (0: the deployment's default)")
	f.fs.DurationVar(&f.idle, "idle-timeout", 0, "suspend this account's sandboxes after this long idle, overriding the deployment's default (0: the default)")
	return f
}

// idleTimeout is the idle timeout override to write: nil when it was not
// given (on create it always is).
func (f *accountFlags) idleTimeout(only map[string]bool) (*time.Duration, error) {
	if only != nil && !only["idle-timeout"] {
		return nil, nil
	}
	if f.idle < 0 || (f.idle > 0 && f.idle < time.Second) {
		return nil, errors.New("--idle-timeout must be 0 or at least 1s")
	}
	return &f.idle, nil
}

func (f *accountFlags) apply(a *store.Account, only map[string]bool) error {
	set := func(name string) bool { return only == nil || only[name] }
	if set("name") && f.name != "" {
		a.Name = f.name
	}
	if set("limit") {
		if f.limit < 0 {
			return errors.New("--limit must be 0 or more")
		}
		a.ConcurrentLimit = f.limit
	}
	if set("enabled") {
		a.SandboxesEnabled = f.enabled
	}
	if set("platforms") {
		a.AllowedPlatforms = nil
		if p := strings.TrimSpace(f.platforms); p != "" && p != "none" {
			for _, v := range strings.Split(p, ",") {
				switch v = strings.TrimSpace(v); v {
				case "linux", "macos":
					a.AllowedPlatforms = append(a.AllowedPlatforms, v)
				default:
					return fmt.Errorf("--platforms: unknown platform %q (linux, macos)", v)
				}
			}
		}
	}
	if set("monthly-minutes") {
		if f.minutes < 0 {
			return errors.New("--monthly-minutes must be 0 or more")
		}
		a.MonthlyMinutes = f.minutes
	}
	if set("snapshot-limit") {
		if f.snapshots < 0 {
			return errors.New("--snapshot-limit must be 0 or more")
		}
		a.SnapshotLimit = f.snapshots
	}
	return nil
}

func (a *admin) accountCreate(ctx context.Context, args []string) error {
	f := newAccountFlags("create")
	f.fs.BoolFunc("disabled", "create with the sandboxes flag off", func(string) error { f.enabled = false; return nil })
	if err := parseAnywhere(f.fs, args); err != nil {
		return err
	}
	id, err := arg(f.fs, 0, "account ID")
	if err != nil {
		return err
	}
	acct := store.Account{ID: id, Name: id}
	if err := f.apply(&acct, nil); err != nil {
		return err
	}
	idle, err := f.idleTimeout(nil)
	if err != nil {
		return fmt.Errorf("create account: %w", err)
	}
	acct, err = a.acc.CreateAccount(ctx, acct, *idle)
	if errors.Is(err, accounts.ErrExists) {
		return fmt.Errorf("create account: account %s exists; use `account set`", id)
	}
	if err != nil {
		return err
	}
	return a.printAccount(acct)
}

func (a *admin) accountSet(ctx context.Context, args []string) error {
	f := newAccountFlags("set")
	if err := parseAnywhere(f.fs, args); err != nil {
		return err
	}
	id, err := arg(f.fs, 0, "account ID")
	if err != nil {
		return err
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if len(given) == 0 {
		return adminUsageErr("account set: nothing to change; give a flag such as --limit or --enabled=false")
	}
	idle, err := f.idleTimeout(given)
	if err != nil {
		return fmt.Errorf("set account %s: %w", id, err)
	}
	acct, err := a.acc.UpdateAccount(ctx, id, func(cur *store.Account) error { return f.apply(cur, given) }, idle)
	if err != nil {
		return err
	}
	return a.printAccount(acct)
}

func (a *admin) accountShow(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return adminUsageErr("account show: want one account ID")
	}
	acct, err := a.st.Account(ctx, args[0])
	if err != nil {
		return fmt.Errorf("show account: %w", err)
	}
	return a.printAccount(acct)
}

func (a *admin) accountList(ctx context.Context) error {
	accts, err := a.st.Accounts(ctx)
	if err != nil {
		return err
	}
	if a.json {
		list := make([]accountJSON, len(accts))
		for i, acct := range accts {
			list[i] = toAccountJSON(acct)
		}
		return printJSON(a.out, list)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tENABLED\tLIMIT\tPLATFORMS\tMONTHLY_MINUTES")
	for _, acct := range accts {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%d\t%s\t%d\n", acct.ID, acct.Name, acct.SandboxesEnabled, acct.ConcurrentLimit,
			platformList(acct.AllowedPlatforms), acct.MonthlyMinutes)
	}
	return tw.Flush()
}

func platformList(p []string) string {
	if len(p) == 0 {
		return "any"
	}
	return strings.Join(p, ",")
}

func (a *admin) printAccount(acct store.Account) error {
	if a.json {
		return printJSON(a.out, toAccountJSON(acct))
	}
	_, err := fmt.Fprintf(a.out, "account %s\n  name: %s\n  sandboxes_enabled: %t\n  sandbox_concurrent_limit: %d\n  platforms: %s\n  sandbox_monthly_minutes: %d\n  snapshot_limit: %s\n",
		acct.ID, acct.Name, acct.SandboxesEnabled, acct.ConcurrentLimit, platformList(acct.AllowedPlatforms), acct.MonthlyMinutes, snapshotLimitText(acct.SnapshotLimit))
	return err
}

func (a *admin) projectCreate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sbx admin project create", flag.ContinueOnError)
	acctID := fs.String("account", "", "owning account ID (required)")
	name := fs.String("name", "", "project name, unique in the account (required)")
	id := fs.String("id", "", "project UUID (default: a new random one)")
	if err := parseAnywhere(fs, args); err != nil {
		return err
	}
	if *acctID == "" || *name == "" {
		return adminUsageErr("project create: --account and --name are required")
	}
	if *id == "" {
		*id = newUUID()
	}
	if _, err := a.acc.CreateProject(ctx, store.Project{ID: *id, AccountID: *acctID, Name: *name}); err != nil {
		return err
	}
	if a.json {
		return printJSON(a.out, map[string]string{"id": *id, "account_id": *acctID, "name": *name})
	}
	_, err := fmt.Fprintln(a.out, *id)
	return err
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (a *admin) tokenMint(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sbx admin token mint", flag.ContinueOnError)
	acctID := fs.String("account", "", "account ID (required)")
	name := fs.String("name", "", "what the token is for (shown in listings and audit)")
	kind := fs.String("kind", "agent", "agent (the sandbox API) or project (refused by the sandbox API)")
	if err := parseAnywhere(fs, args); err != nil {
		return err
	}
	if *acctID == "" {
		return adminUsageErr("token mint: --account is required")
	}
	switch store.TokenKind(*kind) {
	case store.TokenAgent, store.TokenProject:
	default:
		return adminUsageErr(fmt.Sprintf("token mint: --kind %q: want agent or project", *kind))
	}
	minted, err := a.acc.MintToken(ctx, *acctID, store.TokenKind(*kind), *name)
	if err != nil {
		return err
	}
	id, secret := minted.ID, minted.Secret
	// The secret goes to stdout alone, so `TOKEN=$(sbx admin token mint ...)`
	// works; the ID (for revoking) goes to stderr.
	fmt.Fprintf(os.Stderr, "minted %s token %s for account %s; the secret is shown once\n", *kind, id, *acctID)
	if a.json {
		return printJSON(a.out, map[string]string{"id": id, "account_id": *acctID, "kind": *kind, "token": secret})
	}
	_, err = fmt.Fprintln(a.out, secret)
	return err
}

func (a *admin) tokenRevoke(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return adminUsageErr("token revoke: want one token ID")
	}
	if err := a.acc.RevokeToken(ctx, args[0]); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &notFoundError{msg: fmt.Sprintf("no token with ID %q: the ID is the tok-... that `sbx admin token mint` printed on stderr, also named as the caller in audit entries", args[0])}
		}
		return fmt.Errorf("revoke token: %w", err)
	}
	if a.json {
		return printJSON(a.out, map[string]any{"id": args[0], "revoked": true})
	}
	_, err := fmt.Fprintf(a.out, "revoked %s\n", args[0])
	return err
}

// parseAnywhere parses fs from args with flags before, between or after
// the positional arguments (the flag package alone stops at the first
// positional one and would silently ignore the rest).
func parseAnywhere(fs *flag.FlagSet, args []string) error {
	// The flag package would print every flag after its error; one line
	// saying what was wrong is the CLI's way (--help shows the rest).
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return adminUsageErr(fs.Name() + ": " + err.Error())
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// arg is the i-th positional argument; the admin commands take one, and
// anything more is refused rather than ignored.
func arg(fs *flag.FlagSet, i int, name string) (string, error) {
	if fs.NArg() <= i || fs.Arg(i) == "" {
		return "", adminUsageErr("missing " + name)
	}
	if fs.NArg() > i+1 {
		return "", adminUsageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(i+1)))
	}
	return fs.Arg(i), nil
}

func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// snapshotLimitText is an account's snapshot limit, or "default" when it
// takes the deployment's.
func snapshotLimitText(n int) string {
	if n <= 0 {
		return "default"
	}
	return strconv.Itoa(n)
}
