package flagenv

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestUnshown: a variable fills its flag when the command line does not
// set it, a flag on the command line wins, and neither the variable's
// value nor the flag's shows in the usage.
func TestUnshown(t *testing.T) {
	t.Parallel()
	const secret = "postgres://app:hunter2@db/app"
	env := map[string]string{"SBX_DATABASE_URL": secret, "SBX_REDIS_URL": "redis://:pw@r:6379"}
	getenv := func(k string) string { return env[k] }
	vars := map[string]string{"database-url": "SBX_DATABASE_URL", "redis-url": "SBX_REDIS_URL", "other": "SBX_UNSET"}
	tests := []struct {
		args              []string
		wantDB, wantRedis string
	}{
		{nil, secret, "redis://:pw@r:6379"},
		{[]string{"--redis-url", "redis://r2"}, secret, "redis://r2"},
		{[]string{"--database-url="}, "", "redis://:pw@r:6379"}, // given empty: stays empty
	}
	for _, tt := range tests {
		var usage bytes.Buffer
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(&usage)
		db := fs.String("database-url", "", "Postgres URL (default: $SBX_DATABASE_URL)")
		redis := fs.String("redis-url", "", "Redis URL (default: $SBX_REDIS_URL)")
		other := fs.String("other", "keep", "untouched when its variable is unset")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if err := Unshown(fs, getenv, vars); err != nil {
			t.Fatal(err)
		}
		if *db != tt.wantDB || *redis != tt.wantRedis || *other != "keep" {
			t.Errorf("%q: database-url %q redis-url %q other %q, want %q %q keep", tt.args, *db, *redis, *other, tt.wantDB, tt.wantRedis)
		}
		fs.Usage()
		if u := usage.String(); strings.Contains(u, "hunter2") || strings.Contains(u, ":pw@") || !strings.Contains(u, "$SBX_DATABASE_URL") {
			t.Errorf("usage after parsing %q:\n%s", tt.args, u)
		}
	}
}
