package edgeapi

import "github.com/sbxedge/sbx/internal/connlog"

// PathConnections: POST ConnectionsReport → 200 ConnectionsReportResponse.
// The edge sends one every second or so: the connections that opened,
// changed or closed, and by arriving at all, the renewal of the lease on
// every connection the edge still holds open (see connlog.Batch).
const PathConnections = Prefix + "/connections"

// ConnectionsReport is one batch of the connection log.
type ConnectionsReport = connlog.Batch

// ConnectionsReportResponse acknowledges a batch.
type ConnectionsReportResponse struct {
	Recorded int `json:"recorded"`
}
