package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/queue"
)

// spawn starts a claimed task's process in its own process group, its
// output going straight to the run's files. It returns the run, or the
// outcome to record when the process could not be started.
func (w *Worker) spawn(c *queue.Claimed) (*run, *queue.Outcome) {
	r := &run{c: c, dir: filepath.Join(w.opt.Home, "runs", c.RunID)}
	fail := func(class, msg string) (*run, *queue.Outcome) {
		if c.Spec.Probe {
			// A probe's failures are expected: never logged as errors.
			w.log.Info("run.spawn_failed", "task", c.TaskID, "run", c.RunID, "error", msg, "probe", true)
		} else {
			w.log.Warn("run.spawn_failed", "task", c.TaskID, "run", c.RunID, "error", msg)
		}
		return r, &queue.Outcome{State: queue.RunFailed, Class: class, Error: msg}
	}
	// The worker's own want of resources is not the task's failure: the
	// run is given back (no budget spent) and the worker claims less.
	giveBack := func(what string, err error) (*run, *queue.Outcome) {
		msg := what + ": " + err.Error() + " (the worker's own limit; the task was given back)"
		w.log.Warn("run.spawn_deferred", "task", c.TaskID, "run", c.RunID, "error", msg)
		r.giveBack = true
		return r, &queue.Outcome{State: queue.RunCancelled, Error: msg}
	}
	// A failed write (disk full) does not stop the run.
	// Output that cannot be kept goes to /dev/null, and the run's error
	// says so; only an intent, whose payload needs the folder, fails.
	// The runs folder and the run's own are cq's: a symbolic link at
	// either is refused, or the logs would be written elsewhere.
	dirErr := fsutil.OwnDir(filepath.Dir(r.dir))
	if dirErr == nil {
		dirErr = fsutil.OwnDir(r.dir)
	}
	if dirErr != nil {
		r.outputLost = "output lost: run folder: " + dirErr.Error()
	}
	var err error
	logFile := func(name string) (*os.File, error) {
		if r.outputLost == "" {
			f, err := fsutil.OpenPrivate(filepath.Join(r.dir, name), os.O_WRONLY|os.O_TRUNC)
			if err == nil || isResourceErr(err) {
				return f, err
			}
			r.outputLost = "output lost: " + name + ": " + err.Error()
		}
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if r.stdout, err = logFile("stdout.log"); err != nil {
		if isResourceErr(err) {
			return giveBack("stdout", err)
		}
		return fail(queue.ClassTransient, "stdout: "+err.Error())
	}
	if r.stderr, err = logFile("stderr.log"); err != nil {
		r.stdout.Close()
		if isResourceErr(err) {
			return giveBack("stderr", err)
		}
		return fail(queue.ClassTransient, "stderr: "+err.Error())
	}
	closeFiles := func() {
		r.stdout.Close()
		r.stderr.Close()
	}

	sp := c.Spec
	env := w.environ[:len(w.environ):len(w.environ)]
	for k, v := range sp.Env {
		env = append(env, k+"="+v)
	}
	// cq's own variables come last, so a spec's env cannot replace them
	// (the last of duplicate keys wins): CQ_RUN_ID is how a lost run's
	// processes are found and killed.
	env = append(env, "CQ_TASK_ID="+c.TaskID, "CQ_RUN_ID="+c.RunID, "CQ_ATTEMPT="+strconv.Itoa(c.Attempt), "CQ_HOME="+w.opt.Home)
	if w.opt.DB != "" {
		// The run's own cq commands reach this store whatever the
		// worker's environment said: CQ_DB_URLS would come first.
		env = append(env, "CQ_DB_URLS=", "CQ_DB="+w.opt.DB)
	}
	var argv []string
	stdin := os.DevNull
	switch {
	case sp.Shell != "":
		argv = []string{"/bin/sh", "-c", sp.Shell}
	case sp.Intent != "":
		path, msg := w.handler(sp.Intent)
		if msg != "" {
			closeFiles()
			// A missing handler fails the run and is not retried.
			return fail(queue.ClassNone, msg)
		}
		payload := filepath.Join(r.dir, "payload.json")
		body := []byte(sp.Payload)
		if len(body) == 0 {
			body = []byte("null")
		}
		err := dirErr
		if err == nil {
			err = writePrivate(payload, body)
		}
		if err != nil {
			closeFiles()
			if isResourceErr(err) {
				return giveBack("payload", err)
			}
			return fail(queue.ClassTransient, "payload: "+err.Error())
		}
		argv, stdin = []string{path}, payload
		env = append(env, "CQ_PAYLOAD_FILE="+payload)
	default:
		argv = sp.Cmd
	}
	in := w.devNull()
	if in == nil || stdin != os.DevNull {
		if stdin == os.DevNull {
			in, err = os.Open(stdin)
		} else {
			// The payload cq wrote just now, in the run's own folder.
			in, err = fsutil.OpenExisting(stdin, os.O_RDONLY)
		}
		if err != nil {
			closeFiles()
			if isResourceErr(err) {
				return giveBack("stdin", err)
			}
			return fail(queue.ClassTransient, "stdin: "+err.Error())
		}
		defer in.Close()
	}
	cmd := w.command(argv)
	if cmd.Err != nil {
		closeFiles()
		if isResourceErr(cmd.Err) {
			return giveBack("spawn", cmd.Err)
		}
		// Not found in the worker's PATH (or not executable there): no
		// retry would find it, so the run fails at once.
		if errors.Is(cmd.Err, exec.ErrNotFound) {
			return fail(queue.ClassNone, fmt.Sprintf("cannot start: command not found: %s (not in the worker's PATH)", argv[0]))
		}
		return fail(queue.ClassNone, "cannot start: "+cmd.Err.Error())
	}
	cmd.Env, cmd.Dir = env, sp.Cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, r.stdout, r.stderr
	// Its own process group, so that timeouts, cancels and the supervisor
	// reach grandchildren; the parent-death signal is a first line of
	// defence for the direct child.
	r.pidfd = -1
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &r.pidfd}
	w.sup.expect(c.RunID)
	w.forkMu.RLock()
	err = cmd.Start()
	if err == nil {
		w.noteKid(cmd.Process.Pid, c.RunID)
	}
	w.forkMu.RUnlock()
	if err != nil {
		w.sup.del(0, c.RunID)
		w.forgetPath(argv[0])
		closeFiles()
		if isResourceErr(err) {
			return giveBack("spawn", err)
		}
		// The kernel gives the same error for a missing working folder as
		// for a missing command: name the folder when it is the cause.
		if msg := cwdProblem(sp.Cwd); msg != "" {
			return fail(queue.ClassNone, "cannot start: working folder "+msg)
		}
		if isStartErr(err) {
			return fail(queue.ClassNone, "cannot start: "+startErrText(cmd.Path, err))
		}
		return fail(queue.ClassTransient, "spawn: "+err.Error())
	}
	r.cmd, r.pid, r.pgid, r.started = cmd, cmd.Process.Pid, cmd.Process.Pid, time.Now()
	r.renewed(time.Now())
	w.sup.add(r.pgid, c.RunID)
	return r, nil
}

// devNull is /dev/null opened once for the worker's life, every run's
// stdin (an intent's excepted); nil if it cannot be opened, and each run
// then opens its own.
func (w *Worker) devNull() *os.File {
	w.nullOnce.Do(func() { w.null, _ = os.Open(os.DevNull) })
	return w.null
}

// pathTTL is how long a command name's PATH lookup is reused: a busy
// worker runs the same few commands thousands of times a second, and each
// lookup stats every PATH entry before the right one.
const pathTTL = time.Second

type pathEntry struct {
	path string
	at   time.Time
}

// command is exec.Command with the PATH lookup of a bare command name
// reused for pathTTL (the worker's own PATH, as exec.Command uses).
func (w *Worker) command(argv []string) *exec.Cmd {
	name := argv[0]
	if strings.Contains(name, "/") {
		return exec.Command(name, argv[1:]...)
	}
	w.pathMu.Lock()
	e, ok := w.paths[name]
	w.pathMu.Unlock()
	if !ok || time.Since(e.at) > pathTTL {
		cmd := exec.Command(name, argv[1:]...)
		if cmd.Err == nil && filepath.IsAbs(cmd.Path) {
			w.pathMu.Lock()
			w.paths[name] = pathEntry{cmd.Path, time.Now()}
			w.pathMu.Unlock()
		}
		return cmd
	}
	// As exec.Command builds it once LookPath has answered.
	return &exec.Cmd{Path: e.path, Args: argv}
}

// forgetPath drops a cached lookup whose start failed: the next run of
// that name looks it up again.
func (w *Worker) forgetPath(name string) {
	w.pathMu.Lock()
	delete(w.paths, name)
	w.pathMu.Unlock()
}

// handler finds the intent's executable in the handlers folder; the
// message says why it cannot run.
func (w *Worker) handler(name string) (string, string) {
	if !queue.ValidIntent(name) {
		return "", fmt.Sprintf("missing handler: invalid intent name %q", name)
	}
	dir := w.opt.Handlers
	if dir == "" {
		dir = filepath.Join(w.opt.Home, "handlers")
	}
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Sprintf("missing handler: no executable %s", path)
	}
	return path, ""
}

func writePrivate(path string, body []byte) error {
	f, err := fsutil.OpenPrivate(path, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
