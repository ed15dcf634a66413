package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/spool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// specFlags are the task spec flags shared by task create and enqueue.
type specFlags struct {
	id, shell, intent, payload, queue, key, priority string
	timeout, delay, at, cwd                          string
	after, env                                       []string
	unique, okIfActive, hold, probe                  bool
	retries                                          int
}

func (f *specFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.id, "id", "", "task id (re-creating it with the same spec is a no-op)")
	fs.StringVar(&f.shell, "shell", "", "run this string with /bin/sh -c")
	fs.StringVar(&f.intent, "intent", "", "run the handler NAME from the handlers folder")
	fs.StringVar(&f.payload, "payload", "", "JSON payload for --intent")
	fs.StringVar(&f.queue, "queue", "", "queue (default \"default\")")
	fs.StringVar(&f.key, "key", "", "serial lane key: tasks with one key run one at a time, in order")
	fs.BoolVar(&f.unique, "unique", false, "refuse while another task with this --key is not finished")
	fs.BoolVar(&f.okIfActive, "ok-if-active", false, "with --key: if a task with this key is not finished, print its id and exit 0 (implies --unique)")
	fs.StringVar(&f.priority, "priority", "", "P0 (first) to P3 (default P2)")
	fs.StringSliceVar(&f.after, "after", nil, "run only after these tasks are done (ID,…)")
	fs.StringVar(&f.timeout, "timeout", "", "run time limit (default: the queue's)")
	fs.IntVar(&f.retries, "retries", 0, "retries after a non-zero exit (default: the queue's)")
	fs.StringVar(&f.delay, "delay", "", "start no sooner than this long after creation")
	fs.StringVar(&f.at, "at", "", "start no sooner than this time (RFC 3339 or YYYY-MM-DD HH:MM[:SS])")
	fs.StringArrayVar(&f.env, "env", nil, "K=V to set, or K to copy from here (repeatable)")
	fs.StringVar(&f.cwd, "cwd", "", "working folder (default: the current one)")
	fs.BoolVar(&f.hold, "hold", false, "hold the task until cq release")
	fs.BoolVar(&f.probe, "probe", false, "a probe: its failures are expected, never retried, and left out of cq health")
}

// given reports whether any spec flag was set on the command line.
func (f *specFlags) given(fs *pflag.FlagSet) bool {
	any := false
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "home", "db", "output", "quiet", "batch", "file", "spool":
		default:
			any = true
		}
	})
	return any
}

// spec builds a raw spec from the flags and the command after --.
func (f *specFlags) spec(fs *pflag.FlagSet, argv []string) (queue.Spec, error) {
	sp := queue.Spec{
		ID: f.id, Shell: f.shell, Intent: f.intent, Queue: f.queue, Key: f.key, Unique: f.unique,
		Priority: f.priority, After: f.after, Timeout: f.timeout, Delay: f.delay, At: f.at, Hold: f.hold,
		Probe: f.probe,
	}
	if argv != nil {
		sp.Cmd = argv
		if len(argv) == 0 {
			sp.Cmd = []string{}
		}
	}
	if f.okIfActive {
		if f.key == "" {
			return sp, usageErr("--ok-if-active needs --key: it is the key's active task that makes a new one unneeded")
		}
		sp.Unique = true
	}
	if fs.Changed("id") && f.id == "" {
		return sp, usageErr("--id is empty (leave it out for a generated id)")
	}
	// An empty value given on purpose is almost always a variable that was
	// not set (--after "$dep" after a failed enqueue): refused, rather than
	// taken as the flag left out.
	for _, e := range []struct{ name, without string }{
		{"shell", "to run the command after --"}, {"intent", "to run the command after --"},
		{"timeout", "for the queue's"}, {"delay", "to start at once"}, {"at", "to start at once"},
		{"cwd", "for the current folder"},
	} {
		if fs.Changed(e.name) && fs.Lookup(e.name).Value.String() == "" {
			return sp, usageErr("--%s is empty (leave it out %s)", e.name, e.without)
		}
	}
	if fs.Changed("after") && len(f.after) == 0 {
		return sp, usageErr("--after is empty (leave it out for no dependency)")
	}
	if err := checkSpecFlags(fs, f); err != nil {
		return sp, err
	}
	if fs.Changed("payload") {
		sp.Payload = json.RawMessage(f.payload)
		if !json.Valid(sp.Payload) {
			return sp, usageErr("--payload is not valid JSON")
		}
	}
	if fs.Changed("retries") {
		r := f.retries
		sp.Retries = &r
	}
	for _, e := range f.env {
		k, v, ok := strings.Cut(e, "=")
		if k == "" {
			return sp, usageErr("--env %q: want NAME=VALUE or NAME", e)
		}
		if !queue.ValidEnvName(k) {
			return sp, usageErr("--env %q: invalid environment variable name %q", e, k)
		}
		if !ok {
			val, set := os.LookupEnv(k)
			if !set {
				return sp, usageErr("--env %s: %s is not set here", k, k)
			}
			v = val
		}
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env[k] = v
	}
	cwd, err := absCwd(f.cwd)
	if err != nil {
		return sp, err
	}
	sp.Cwd = cwd
	return sp, nil
}

// checkSpecFlags checks the values of the spec flags given that the spec
// would refuse later without naming the flag (its messages serve JSONL
// lines too, whose fields have other names): each error names its flag.
func checkSpecFlags(fs *pflag.FlagSet, f *specFlags) error {
	for _, c := range []struct {
		name  string
		check func(string) error
	}{
		{"id", func(v string) error {
			if !queue.ValidID(v) {
				return fmt.Errorf("invalid id %q (want [A-Za-z0-9][A-Za-z0-9._:@-]{0,127})", v)
			}
			return nil
		}},
		{"intent", func(v string) error {
			if !queue.ValidIntent(v) {
				return fmt.Errorf("invalid intent name %q (want ^[A-Za-z0-9][A-Za-z0-9_.-]*$)", v)
			}
			return nil
		}},
		{"queue", func(v string) error {
			if !queue.ValidQueueName(v) {
				return fmt.Errorf("invalid queue name %q (want [A-Za-z0-9][A-Za-z0-9._:-]{0,127})", v)
			}
			return nil
		}},
		{"priority", func(v string) error { _, err := queue.ParsePriority(v); return err }},
		{"timeout", func(v string) error { _, err := queue.ParseDuration(v); return err }},
		{"delay", func(v string) error { _, err := queue.ParseDuration(v); return err }},
		{"at", func(v string) error { _, err := queue.ParseTime(v, time.Local); return err }},
	} {
		if !fs.Changed(c.name) || (c.name == "queue" && f.queue == "") {
			// --queue "" has always meant the default queue.
			continue
		}
		if err := c.check(fs.Lookup(c.name).Value.String()); err != nil {
			return usageErr("--%s: %v", c.name, err)
		}
	}
	if fs.Changed("key") && f.key != "" {
		if _, err := (queue.Spec{Shell: "x", Key: f.key}).Normalize(); err != nil {
			return usageErr("--key: %v", err)
		}
	}
	return nil
}

// absCwd makes a --cwd (default: the current folder) absolute.
func absCwd(cwd string) (string, error) {
	here, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot read the current folder: %w", err)
	}
	if cwd == "" {
		return here, nil
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(here, cwd)
	}
	return cwd, nil
}

// commandArgs splits cobra's args into those before -- and the command
// after it (nil when there is no --).
func commandArgs(cmd *cobra.Command, args []string) (before, argv []string) {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		return args, nil
	}
	return args[:dash], append([]string{}, args[dash:]...)
}

func newTaskCreateCmd(app *App) *cobra.Command {
	var f specFlags
	cmd := &cobra.Command{
		Use:   "create [spec flags] [-- CMD ARGS…]",
		Short: "Create a task in inbox and print its id",
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv := commandArgs(cmd, args)
			if len(before) > 0 {
				return usageErr("unexpected arguments %q: put the command after --", strings.Join(before, " "))
			}
			return createSpecs(cmd, app, &f, argv, false)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func createSpecs(cmd *cobra.Command, app *App, f *specFlags, argv []string, enqueue bool) error {
	raw, err := f.spec(cmd.Flags(), argv)
	if err != nil {
		return err
	}
	sp, err := raw.Normalize()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, err := app.Store(ctx)
	if err != nil {
		return err
	}
	if err := resolveAfter(ctx, st, &sp); err != nil {
		return err
	}
	res, err := st.Create(ctx, []queue.Spec{sp}, queue.CreateOptions{Enqueue: enqueue})
	if err != nil {
		err = createErr(app, err)
		// --ok-if-active: the key's active task does the work, and a
		// cron line that names it must stay quiet.
		if f.okIfActive && isHeldKey(err) {
			return nil
		}
		return err
	}
	if err := printCreated(app, res, false); err != nil {
		return err
	}
	if enqueue {
		hintNoWorker(ctx, app, st, res)
	}
	return nil
}

// isHeldKey reports whether err is a --unique refusal: the key is held by
// an active task (named in the error).
func isHeldKey(err error) bool {
	var qe *queue.Error
	return errors.As(err, &qe) && qe.Kind == queue.Conflict && qe.Existing != ""
}

// noWorkerHint is what cq enqueue says on a terminal when the tasks it
// queued have no live worker to run them.
const noWorkerHint = "cq: no worker is running; start one with: cq worker"

// hintNoWorker writes noWorkerHint, once, when stderr is a terminal, one
// of res went to todo or blocked, and no worker is live. Never when
// stderr is not a terminal: a script's stderr stays empty on success.
func hintNoWorker(ctx context.Context, app *App, st *queue.Store, res []queue.Created) {
	if !app.stderrIsTerminal() {
		return
	}
	queued := false
	for _, r := range res {
		queued = queued || r.State == queue.TaskTodo || r.State == queue.TaskBlocked
	}
	if !queued {
		return
	}
	if live, err := st.AnyWorkerLive(ctx); err == nil && !live {
		fmt.Fprintln(app.Stderr, noWorkerHint)
	}
}

// printHolder prints, for a --unique refusal, the task that holds the key
// (exit 3, the existing task id on stdout: docs/semantics.md, Unique keys): its id, or with -o json
// one {id, state} object, the shape of one created task.
func printHolder(app *App, err error) {
	var qe *queue.Error
	if !errors.As(err, &qe) || qe.Existing == "" {
		return
	}
	if app.jsonOut() {
		_ = writeJSONLine(app.Stdout, map[string]string{"id": qe.Existing, "state": qe.ExistingState})
		return
	}
	fmt.Fprintln(app.Stdout, qe.Existing)
}

// printCreated prints the created tasks' ids, or with -o json {id, state}:
// one object for one spec, and for --batch (list) an array, whatever its
// length, so that its shape does not depend on the input.
func printCreated(app *App, res []queue.Created, list bool) error {
	if err := writeCreated(app, res, list); err != nil && len(res) > 0 {
		// The tasks are stored and will run: a script must not take
		// the failure for a refused enqueue and enqueue them again.
		what := "task " + res[0].ID + " is"
		if len(res) > 1 {
			what = fmt.Sprintf("%d tasks (%s…) are", len(res), res[0].ID)
		}
		return fmt.Errorf("%s stored, but the output could not be written: %w", what, err)
	}
	return nil
}

func writeCreated(app *App, res []queue.Created, list bool) error {
	if app.jsonOut() {
		out := make([]map[string]string, len(res))
		for i, r := range res {
			out[i] = map[string]string{"id": r.ID, "state": r.State}
		}
		if app.format() == "jsonl" || !list {
			for _, o := range out {
				if err := writeJSONLine(app.Stdout, o); err != nil {
					return err
				}
			}
			return nil
		}
		return writeJSON(app.Stdout, out)
	}
	w := bufio.NewWriter(app.Stdout)
	for _, r := range res {
		fmt.Fprintln(w, r.ID)
	}
	return w.Flush()
}

func newEnqueueCmd(app *App) *cobra.Command {
	var f specFlags
	var batch, toSpool bool
	var file string
	cmd := &cobra.Command{
		Use:   "enqueue ID… | enqueue [spec flags] -- CMD ARGS… | enqueue --batch [-f FILE]",
		Short: "Take inbox tasks in, or create and enqueue a task in one step",
		Long: `enqueue ID…                      take inbox tasks through the gateway step
enqueue [spec flags] -- CMD ARGS…  create and enqueue a task; prints its id
enqueue --shell 'STRING'           the same, run with /bin/sh -c
enqueue --batch [-f FILE]          one JSON spec per line, all in one transaction
enqueue --spool [spec] -- CMD…     append to the spool without opening the database`,
		RunE: func(cmd *cobra.Command, args []string) error {
			before, argv := commandArgs(cmd, args)
			switch {
			case batch && toSpool:
				return usageErr("--spool appends one task given by flags and -- CMD; it cannot take --batch")
			case batch:
				if len(args) > 0 || f.given(cmd.Flags()) {
					return usageErr("--batch takes its specs from stdin or -f FILE, not from flags or arguments")
				}
				return enqueueBatch(cmd, app, file)
			case file != "":
				return usageErr("-f needs --batch")
			case toSpool:
				if len(before) > 0 {
					return usageErr("unexpected arguments %q: put the command after --", strings.Join(before, " "))
				}
				return enqueueSpool(cmd, app, &f, argv)
			case argv != nil || f.shell != "" || f.intent != "":
				if len(before) > 0 {
					return usageErr("unexpected arguments %q: put the command after --", strings.Join(before, " "))
				}
				return createSpecs(cmd, app, &f, argv, true)
			case f.given(cmd.Flags()) && len(args) > 0:
				return usageErr("enqueue ID takes no spec flags: an inbox task keeps the spec it was created with")
			case f.given(cmd.Flags()):
				return usageErr("empty command: give a command after --, --shell, or --intent")
			case len(args) == 0:
				return usageErr("nothing to enqueue: give task ids, or a command after --")
			}
			st, err := app.Store(cmd.Context())
			if err != nil {
				return err
			}
			if app.stderrIsTerminal() {
				if err := commandNotIDs(cmd, st, args); err != nil {
					return err
				}
			}
			var queued []queue.Created
			err = multi(app.Stderr, args, func(ref string) error {
				id, state, err := st.Enqueue(cmd.Context(), ref)
				if err != nil {
					return err
				}
				queued = append(queued, queue.Created{ID: id, State: state})
				if app.jsonOut() {
					return writeJSONLine(app.Stdout, map[string]string{"id": id, "state": state})
				}
				fmt.Fprintln(app.Stdout, id)
				return nil
			})
			hintNoWorker(cmd.Context(), app, st, queued)
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&batch, "batch", false, "read one JSON task spec per line (stdin, or -f FILE)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "with --batch: read specs from FILE")
	cmd.Flags().BoolVar(&toSpool, "spool", false, "append to the spool file without opening the database")
	return cmd
}

// commandNotIDs is the hint for cq enqueue WORD… typed at a terminal
// with none of the words a task id: most likely a command that lacks its
// "--". Piped, each word is reported as an unknown task, as before.
func commandNotIDs(cmd *cobra.Command, st *queue.Store, args []string) error {
	for _, a := range args {
		if _, err := st.Resolve(cmd.Context(), a); !queue.IsNotFound(err) {
			return nil
		}
	}
	return &queue.Error{Kind: queue.NotFound,
		Msg: fmt.Sprintf("no task %q; to run a command, put it after --: cq enqueue -- %s", args[0], quoteWords(args))}
}

// resolveAfter turns the --after references of a spec made from flags
// (prefixes allowed) into exact task ids.
func resolveAfter(ctx context.Context, st *queue.Store, sp *queue.Spec) error {
	for i, a := range sp.After {
		id, err := st.Resolve(ctx, a)
		if err != nil {
			if queue.IsNotFound(err) {
				return fmt.Errorf("--after: %w", err)
			}
			return err
		}
		sp.After[i] = id
	}
	return nil
}

// createErr is a one-task create's error as the CLI reports it: the
// spec's own error rather than its batch line's, and the key's holder on
// stdout for a unique-key conflict.
func createErr(app *App, err error) error {
	err = oneSpecErr(err)
	printHolder(app, err)
	return err
}

// oneSpecErr is the error of Create for one spec: the spec's own error
// rather than its batch line's.
func oneSpecErr(err error) error {
	var le *queue.LineError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// shellSafe says whether c needs no quoting in a shell word.
func shellSafe(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:,+@%", c)
}

// quoteWords shows args as a shell would need them typed, for a hint to
// copy; it is printed, never run.
func quoteWords(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		safe := a != "" && strings.IndexFunc(a, func(c rune) bool { return !shellSafe(c) }) < 0
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// batchProgressMin is the batch size above which cq enqueue --batch shows
// a progress bar on a terminal: a smaller one is stored too fast to see.
const batchProgressMin = 1000

// enqueueBatch stores every line of the input in one transaction, or
// nothing.
func enqueueBatch(cmd *cobra.Command, app *App, file string) error {
	in := app.Stdin
	if file != "" && file != "-" {
		fh, err := os.Open(file)
		if err != nil {
			return usageErr("-f: %v", err)
		}
		defer fh.Close()
		in = fh
	}
	here, err := os.Getwd()
	if err != nil {
		return err
	}
	specs, lineNo, err := readSpecLines(in, here)
	if err != nil {
		return err
	}
	if len(specs) == 0 {
		return printCreated(app, nil, true)
	}
	st, err := app.Store(cmd.Context())
	if err != nil {
		return err
	}
	opt := queue.CreateOptions{Enqueue: true}
	var bar *progressBar
	if len(specs) > batchProgressMin {
		if bar = app.newProgress("storing", len(specs)); bar != nil {
			opt.Progress = bar.set
		}
	}
	res, err := st.Create(cmd.Context(), specs, opt)
	bar.finish(err == nil)
	if err != nil {
		err = batchErr(err, lineNo)
		printHolder(app, err)
		return err
	}
	if err := printCreated(app, res, true); err != nil {
		return err
	}
	hintNoWorker(cmd.Context(), app, st, res)
	return nil
}

// readSpecLines reads one JSONL spec per line of in (blank lines are
// skipped), as --batch and cq serve's POST /tasks do: each parsed by
// parseSpecLine, returned with its line number. A bad line is a
// *queue.Error of its kind saying "line N: …".
func readSpecLines(in io.Reader, here string) (specs []queue.Spec, lineNo []int, err error) {
	r := bufio.NewReaderSize(in, 1<<16)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			sp, perr := parseSpecLine(line, here)
			if perr != nil {
				return nil, nil, &queue.Error{Kind: queue.KindOf(perr), Msg: fmt.Sprintf("line %d: %v", n, perr)}
			}
			specs = append(specs, sp)
			lineNo = append(lineNo, n)
		}
		if err == io.EOF {
			return specs, lineNo, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// parseSpecLine is one JSONL spec, parsed strictly, its cwd made
// absolute (default here, the reader's working folder; a relative one
// is taken from here), normalised.
func parseSpecLine(line []byte, here string) (queue.Spec, error) {
	sp, err := queue.ParseSpecJSON(line)
	if err != nil {
		return sp, err
	}
	if sp.Cwd == "" {
		sp.Cwd = here
	} else if !filepath.IsAbs(sp.Cwd) {
		sp.Cwd = filepath.Join(here, sp.Cwd)
	}
	return sp.Normalize()
}

// batchErr is the error of Create for specs read by readSpecLines, as
// --batch reports it: a failed spec as "line N: …" (N its line in the
// input) of the spec's kind, keeping the key's holder of a unique-key
// conflict (Existing); any other error as it is.
func batchErr(err error, lineNo []int) error {
	var le *queue.LineError
	if !errors.As(err, &le) {
		return err
	}
	out := &queue.Error{Kind: queue.KindOf(le.Err), Msg: fmt.Sprintf("line %d: %v", lineNo[le.Line-1], le.Err)}
	var qe *queue.Error
	if errors.As(le.Err, &qe) {
		out.Existing, out.ExistingState = qe.Existing, qe.ExistingState
	}
	return out
}

// enqueueSpool appends one spec to the spool without opening the
// database. The line carries its id, an absolute cwd, and an absolute
// time instead of a delay, so it means the same whenever it is drained.
func enqueueSpool(cmd *cobra.Command, app *App, f *specFlags, argv []string) error {
	if f.okIfActive {
		return usageErr("--ok-if-active needs the store to find the key's active task; it cannot be used with --spool")
	}
	raw, err := f.spec(cmd.Flags(), argv)
	if err != nil {
		return err
	}
	now := app.now()
	if raw.Delay != "" && raw.At != "" {
		return usageErr("give only one of --delay and --at")
	}
	if raw.Delay != "" {
		d, err := queue.ParseDuration(raw.Delay)
		if err != nil {
			return err
		}
		if d < 0 {
			return usageErr("--delay must not be negative")
		}
		raw.Delay, raw.At = "", queue.FormatTime(now.Add(d))
	}
	sp, err := raw.Normalize()
	if err != nil {
		return err
	}
	if sp.ID == "" {
		sp.ID = queue.NewID(now)
	}
	line, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	// A line for a store no command can open would wait there forever.
	if _, err := app.dbPath(); err != nil {
		return err
	}
	home, err := app.Home()
	if err != nil {
		return err
	}
	if err := spool.Append(home, line, now); err != nil {
		return err
	}
	if app.jsonOut() {
		// Not in the store yet, so in no state: the drain gives it one.
		return writeJSONLine(app.Stdout, map[string]any{"id": sp.ID, "spooled": true})
	}
	fmt.Fprintln(app.Stdout, sp.ID)
	return nil
}
