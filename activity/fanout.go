package activity

import "github.com/sbxedge/sbx/internal/fanout"

// Fanout delivers notifications to this process's subscribers. Both stores
// use it: memstore directly, redisstore behind its Redis subscription. It
// is the keyed fan-out the control stores' event streams use too.
type Fanout = fanout.Hub
