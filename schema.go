// Package cq holds the embedded database schema; go:embed cannot reach
// parent folders, so the root package owns it.
package cq

import _ "embed"

// SchemaSQL is schema.sql, split into migrations by internal/store/sqlite.
//
//go:embed schema.sql
var SchemaSQL string
