//go:build tools

// Package s3bins pins the S3-compatible server the object store tests run
// against: SeaweedFS's weed, built by `make s3-bins` from this module into
// a cache folder outside the repository keyed by its version; see
// ../s3test.
package s3bins

import (
	_ "github.com/seaweedfs/seaweedfs/weed"
)
