package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/spf13/cobra"
)

// completionIDs is how many task ids a Tab press offers at most.
const completionIDs = 200

// completionWait bounds the store reads of one Tab press: a shell that
// hangs is worse than one that offers nothing.
const completionWait = 2 * time.Second

// idArgs names the commands whose arguments are task ids, by their path
// below cq; the value is how many ids they take (0: any number). A
// command of the table that this build lacks is skipped.
var idArgs = map[string]int{
	"show": 1, "logs": 1, "wait": 0, "cancel": 0, "retry": 0, "hold": 0, "release": 0,
	"enqueue": 0, "clone": 0, "task set": 1, "answer": 1, "send": 1,
}

// queueArgs names the commands whose one argument is a queue.
var queueArgs = []string{"queue set", "queue pause", "queue resume", "queue clear"}

// setStateTargets are the states cq task set-state can reach.
var setStateTargets = []string{queue.TaskTodo, queue.TaskBlocked, queue.TaskCancelled}

// addCompletions registers the completion of task ids, queues, states,
// priorities and output formats on the command tree. Only a completion
// request (cobra's hidden __complete command, which the shells' scripts
// run on each Tab press) builds it: other commands pay nothing. args is
// the request's command line, its last word the one being completed.
func addCompletions(root *cobra.Command, app *App, args []string) {
	// Whether a -- comes before the word being completed. Cobra's own
	// count of the arguments before a -- is not reliable while completing
	// (its flags are parsed twice, the first time with a -- added).
	afterDash := len(args) > 1 && slices.Contains(args[1:len(args)-1], "--")
	walk(root, func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), "cq ")
		if n, ok := idArgs[path]; ok {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if afterDash {
					// After --: the command a task runs (cq enqueue -- CMD).
					return nil, cobra.ShellCompDirectiveDefault
				}
				if n > 0 && len(args) >= n {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return app.completeIDs(cmd, args, toComplete, "")
			}
		}
		if path == "task set-state" {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				switch len(args) {
				case 0:
					return app.completeIDs(cmd, args, toComplete, "")
				case 1:
					return words(setStateTargets, toComplete, ""), cobra.ShellCompDirectiveNoFileComp
				}
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
		}
		if slices.Contains(queueArgs, path) {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return app.completeQueues(cmd, toComplete)
			}
		}
		flags := c.LocalNonPersistentFlags()
		if flags.Lookup("queue") != nil {
			_ = c.RegisterFlagCompletionFunc("queue", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return app.completeQueues(cmd, toComplete)
			})
		}
		if flags.Lookup("state") != nil {
			_ = c.RegisterFlagCompletionFunc("state", func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				// --state takes a comma-separated list: complete its last
				// item.
				head, last := splitList(toComplete)
				return words(queue.TaskStates, last, head), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if flags.Lookup("priority") != nil {
			_ = c.RegisterFlagCompletionFunc("priority", cobra.FixedCompletions(
				[]cobra.Completion{"P0\tfirst", "P1", "P2\tthe default", "P3\tlast"}, cobra.ShellCompDirectiveNoFileComp))
		}
		if flags.Lookup("timeout-counts-asks") != nil {
			_ = c.RegisterFlagCompletionFunc("timeout-counts-asks", cobra.FixedCompletions(
				[]cobra.Completion{"true", "false\tthe default"}, cobra.ShellCompDirectiveNoFileComp))
		}
		if flags.Lookup("after") != nil {
			_ = c.RegisterFlagCompletionFunc("after", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				head, last := splitList(toComplete)
				return app.completeIDs(cmd, nil, last, head)
			})
		}
	})
	_ = root.RegisterFlagCompletionFunc("output", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		formats := []string{"table", "json", "jsonl"}
		if cmd.Name() == "health" {
			formats = append(formats, "prometheus")
		}
		return words(formats, toComplete, ""), cobra.ShellCompDirectiveNoFileComp
	})
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// splitList splits a comma-separated flag value being typed into the
// items already complete (with their trailing comma) and the last one.
func splitList(s string) (head, last string) {
	i := strings.LastIndexByte(s, ',')
	return s[:i+1], s[i+1:]
}

// words are the candidates among all that start with prefix, each after
// head.
func words(all []string, prefix, head string) []cobra.Completion {
	var out []cobra.Completion
	for _, w := range all {
		if strings.HasPrefix(w, prefix) {
			out = append(out, head+w)
		}
	}
	return out
}

// peekStore opens the store for a completion: read-only, never creating
// the home, the database or any file beside it, and never draining the
// spool (a write). No store yet means nothing to offer, so it is nil
// then, as it is on any error.
func (a *App) peekStore(ctx context.Context) *queue.Store {
	url := a.DBFlag
	if url == "" {
		url = a.Getenv("CQ_DB")
	}
	var path string
	if isPostgres(url) || a.Getenv("CQ_DB_URLS") != "" {
		// Opening would create cq's schema; completion offers nothing.
		return nil
	}
	if url != "" {
		p, err := sqlite.PathFromURL(url)
		if err != nil {
			return nil
		}
		path = p
	} else {
		home, err := a.homePath()
		if err != nil {
			return nil
		}
		path = filepath.Join(home, "cq.db")
	}
	d, err := sqlite.OpenPeek(ctx, path)
	if err != nil {
		cobra.CompDebugln("cq: "+err.Error(), false)
		return nil
	}
	return queue.New(d.Store())
}

func completionContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, completionWait)
}

// completeIDs offers the ids that start with toComplete (each after head,
// the items already typed of a list), leaving out those in args: tasks
// not yet terminal first, newest first, described by state and command.
func (a *App) completeIDs(cmd *cobra.Command, args []string, toComplete, head string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const none = cobra.ShellCompDirectiveNoFileComp
	if toComplete != "" && !queue.ValidID(toComplete) {
		return nil, none
	}
	ctx, cancel := completionContext(cmd)
	defer cancel()
	st := a.peekStore(ctx)
	if st == nil {
		return nil, none
	}
	defer st.Backend().Close()
	hints, err := st.CompletionIDs(ctx, toComplete, completionIDs+len(args))
	if err != nil {
		cobra.CompDebugln("cq: "+err.Error(), false)
		return nil, none
	}
	var out []cobra.Completion
	for _, h := range hints {
		if slices.Contains(args, h.ID) || len(out) == completionIDs {
			continue
		}
		desc := h.State + " " + h.Command
		if r := []rune(desc); len(r) > 60 {
			desc = string(r[:59]) + "…"
		}
		// A description is one line: a shell command may hold tabs and
		// newlines.
		desc = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, desc)
		out = append(out, cobra.CompletionWithDesc(head+h.ID, desc))
	}
	return out, none | cobra.ShellCompDirectiveKeepOrder
}

// completeQueues offers the names of the queues the store knows.
func (a *App) completeQueues(cmd *cobra.Command, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const none = cobra.ShellCompDirectiveNoFileComp
	ctx, cancel := completionContext(cmd)
	defer cancel()
	st := a.peekStore(ctx)
	if st == nil {
		return nil, none
	}
	defer st.Backend().Close()
	names, err := st.QueueNames(ctx)
	if err != nil {
		cobra.CompDebugln("cq: "+err.Error(), false)
		return nil, none
	}
	return words(names, toComplete, ""), none
}
