// Package certstore is a certmagic.Storage on Redis, so every edge replica
// sees the same certificates, ACME accounts and challenge tokens, and the
// ACME locks that make N replicas issue a certificate once. No maintained
// module fits without linking all of Caddy, so this is the small version:
// values in hashes, one sorted set as the key index for List, and locks as
// SET NX PX leases renewed while held.
package certstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/internal/tick"
)

var _ certmagic.Storage = (*Redis)(nil)

// Redis stores under Prefix in one Redis database. Close stops the lease
// renewers of locks still held.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	// LockTTL is a lock's lease: a replica that dies holding a lock blocks
	// others for at most this long. Renewed every LockTTL/3 while held.
	lockTTL time.Duration
	poll    time.Duration

	mu    sync.Mutex // guards locks
	locks map[string]*heldLock
	wg    sync.WaitGroup // lease renewers
}

type heldLock struct {
	token string
	stop  context.CancelFunc
}

// New returns a storage using rdb under prefix (e.g. "sbx:certs:").
func New(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, lockTTL: time.Minute, poll: 250 * time.Millisecond, locks: map[string]*heldLock{}}
}

func (r *Redis) valueKey(key string) string { return r.prefix + "v:" + key }
func (r *Redis) indexKey() string           { return r.prefix + "index" }
func (r *Redis) lockKey(name string) string { return r.prefix + "lock:" + name }

func clean(key string) string { return strings.Trim(path.Clean("/"+key), "/") }

// Store writes the value and indexes the key in one transaction.
func (r *Redis) Store(ctx context.Context, key string, value []byte) error {
	key = clean(key)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.valueKey(key), "v", value, "m", time.Now().UnixNano())
		p.ZAdd(ctx, r.indexKey(), redis.Z{Member: key})
		return nil
	})
	if err != nil {
		return fmt.Errorf("certstore: store %s: %w", key, err)
	}
	return nil
}

// Load returns fs.ErrNotExist for a missing key, as certmagic expects.
func (r *Redis) Load(ctx context.Context, key string) ([]byte, error) {
	key = clean(key)
	v, err := r.rdb.HGet(ctx, r.valueKey(key), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("certstore: %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("certstore: load %s: %w", key, err)
	}
	return v, nil
}

// Delete removes key and, if it names a directory, everything under it.
func (r *Redis) Delete(ctx context.Context, key string) error {
	key = clean(key)
	under, err := r.under(ctx, key)
	if err != nil {
		return err
	}
	if len(under) == 0 && !r.Exists(ctx, key) {
		return fmt.Errorf("certstore: delete %s: %w", key, fs.ErrNotExist)
	}
	keys := append(under, key)
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, r.valueKey(k))
			p.ZRem(ctx, r.indexKey(), k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("certstore: delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a stored value or a directory of some.
func (r *Redis) Exists(ctx context.Context, key string) bool {
	key = clean(key)
	if n, err := r.rdb.Exists(ctx, r.valueKey(key)).Result(); err == nil && n > 0 {
		return true
	}
	under, err := r.under(ctx, key)
	return err == nil && len(under) > 0
}

// under lists every stored key below dir, using the index's lexical order.
func (r *Redis) under(ctx context.Context, dir string) ([]string, error) {
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	keys, err := r.rdb.ZRangeByLex(ctx, r.indexKey(), &redis.ZRangeBy{Min: "[" + prefix, Max: "[" + prefix + "\xff"}).Result()
	if err != nil {
		return nil, fmt.Errorf("certstore: list %s: %w", dir, err)
	}
	return keys, nil
}

// List returns the keys under dir: all of them when recursive, else the
// direct children (files and directories).
func (r *Redis) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	dir = clean(dir)
	keys, err := r.under(ctx, dir)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("certstore: list %s: %w", dir, fs.ErrNotExist)
	}
	if recursive {
		return keys, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		rest := strings.TrimPrefix(k, dir+"/")
		if dir == "" {
			rest = k
		}
		child, _, _ := strings.Cut(rest, "/")
		full := path.Join(dir, child)
		if !seen[full] {
			seen[full] = true
			out = append(out, full)
		}
	}
	return out, nil
}

// Stat describes a stored value or a directory.
func (r *Redis) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	key = clean(key)
	vals, err := r.rdb.HMGet(ctx, r.valueKey(key), "v", "m").Result()
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("certstore: stat %s: %w", key, err)
	}
	if v, ok := vals[0].(string); ok {
		var mod time.Time
		if m, ok := vals[1].(string); ok {
			var ns int64
			_, _ = fmt.Sscan(m, &ns)
			mod = time.Unix(0, ns)
		}
		return certmagic.KeyInfo{Key: key, Modified: mod, Size: int64(len(v)), IsTerminal: true}, nil
	}
	if under, err := r.under(ctx, key); err == nil && len(under) > 0 {
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("certstore: stat %s: %w", key, fs.ErrNotExist)
}

// Lock blocks until this process holds name across all replicas, or ctx
// ends. The lease is renewed until Unlock (or Close), so a long ACME
// transaction keeps it; a crashed holder's lease runs out after LockTTL.
func (r *Redis) Lock(ctx context.Context, name string) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		ok, err := r.rdb.SetNX(ctx, r.lockKey(name), token, r.lockTTL).Result()
		if err != nil {
			return fmt.Errorf("certstore: lock %s: %w", name, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("certstore: lock %s: %w", name, context.Cause(ctx))
		case <-time.After(r.poll):
		}
	}
	rctx, stop := context.WithCancel(context.Background())
	r.mu.Lock()
	r.locks[name] = &heldLock{token: token, stop: stop}
	r.mu.Unlock()
	r.wg.Add(1)
	go r.renew(rctx, name, token)
	return nil
}

// renewScript extends the lease only if we still hold it.
var renewScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)

// unlockScript deletes the lock only if we still hold it, so a lock that
// expired and was taken by another replica is not released by us.
var unlockScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func (r *Redis) renew(ctx context.Context, name, token string) {
	defer r.wg.Done()
	tick.Every(ctx, r.lockTTL/3, func() bool {
		_ = renewScript.Run(ctx, r.rdb, []string{r.lockKey(name)}, token, r.lockTTL.Milliseconds()).Err()
		return true
	})
}

// Unlock releases a lock this process holds.
func (r *Redis) Unlock(ctx context.Context, name string) error {
	r.mu.Lock()
	l := r.locks[name]
	delete(r.locks, name)
	r.mu.Unlock()
	if l == nil {
		return fmt.Errorf("certstore: unlock %s: not held", name)
	}
	l.stop()
	if err := unlockScript.Run(ctx, r.rdb, []string{r.lockKey(name)}, l.token).Err(); err != nil {
		return fmt.Errorf("certstore: unlock %s: %w", name, err)
	}
	return nil
}

// Close stops renewing every lock still held (their leases then expire)
// and waits for the renewers. The Redis client is the caller's.
func (r *Redis) Close() {
	r.mu.Lock()
	for _, l := range r.locks {
		l.stop()
	}
	r.locks = map[string]*heldLock{}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Redis) String() string { return "certstore.Redis(" + r.prefix + ")" }
