//go:build man

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// manCommand is the hidden cq __man DIR of a build with the man tag (make
// man): it writes a man page for cq and for each of its commands into
// DIR. The cq that is installed is built without it, so it neither grows
// by the man page generator nor pays its start-up cost.
func manCommand(*App) *cobra.Command {
	return &cobra.Command{
		Use:    "__man DIR",
		Short:  "Write the man pages into DIR",
		Hidden: true,
		Args:   exactArgs(1, "__man takes one folder"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			// The pages are written through Markdown, which would take
			// <home> in a flag's help for an HTML tag and drop it.
			escape := func(f *pflag.Flag) { f.Usage = strings.ReplaceAll(f.Usage, "<", `\<`) }
			var walk func(*cobra.Command)
			walk = func(c *cobra.Command) {
				c.LocalFlags().VisitAll(escape)
				for _, sub := range c.Commands() {
					walk(sub)
				}
			}
			walk(root)
			// SOURCE_DATE_EPOCH, when set, dates the pages (reproducible
			// builds); else they carry this month.
			err := doc.GenManTree(root, &doc.GenManHeader{Title: "CQ", Section: "1", Source: "cq " + version, Manual: "cq manual"}, args[0])
			if err != nil {
				return fmt.Errorf("writing the man pages: %w", err)
			}
			return nil
		},
	}
}
