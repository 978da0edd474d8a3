package main_test

import (
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// The server counts what `sluice proxy` and /v1/forward-auth decide.
var _ proxy.Accounting = (*server.Server)(nil)
