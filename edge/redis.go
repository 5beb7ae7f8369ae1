package edge

import (
	"fmt"

	"github.com/sbxedge/sbx/activity/redisstore"
)

// openRedis opens the edge's one Redis client and, unless activity is
// handed in or turned off, the activity store on it, where control's idle
// detector reads SSH and preview activity.
func (e *Edge) openRedis() error {
	var err error
	if e.rdb, err = redisstore.OpenClient(e.cfg.RedisURL, e.log); err != nil {
		return err
	}
	switch {
	case e.cfg.Activity != nil:
		e.act = e.cfg.Activity
	case e.cfg.NoActivity || e.rdb == nil:
		e.log.Warn("no activity store: SSH and preview activity is not recorded; control must run without idle offload")
	default:
		s, err := redisstore.New(redisstore.Config{
			Client: e.rdb, Prefix: e.cfg.ActivityPrefix, Registry: e.reg, Logger: e.log.With("component", "activity"),
		})
		if err != nil {
			return fmt.Errorf("activity: %w", err)
		}
		e.act, e.closeA = s, s.Close
	}
	return nil
}
