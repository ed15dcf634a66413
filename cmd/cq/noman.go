//go:build !man

package main

import "github.com/spf13/cobra"

// manCommand is nil in the cq that is installed: see man.go.
func manCommand(*App) *cobra.Command { return nil }
