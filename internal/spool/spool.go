// Package spool is cq's ingress file: producers append task specs to
// <home>/queue.jsonl under an exclusive flock on <home>/queue.lock without
// opening the database, and whoever opens the database drains it.
package spool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/cq-dev/cq/internal/fsutil"
)

// File names inside the home folder.
const (
	FileName     = "queue.jsonl"
	LockName     = "queue.lock"
	RejectedName = "queue.rejected.jsonl"
)

// TornError is the error recorded for an unterminated last line: a
// writer crashed in the middle of an append.
const TornError = "unterminated line (an append was interrupted)"

// Reject is a line that could not be stored, with why.
type Reject struct {
	Line []byte
	Err  string
}

// rejectedLine is the shape of queue.rejected.jsonl: the line as a JSON
// string, or in base64 when it is not valid UTF-8 (a JSON string cannot
// hold its bytes: they would come back as U+FFFD).
type rejectedLine struct {
	At         string  `json:"at"`
	Error      string  `json:"error"`
	Line       *string `json:"line,omitempty"`
	LineBase64 *string `json:"line_base64,omitempty"`
}

// lockFile is the spool's lock file (made private if new), not yet locked.
func lockFile(home string) (*fsutil.Lock, error) {
	l, err := fsutil.OpenLock(filepath.Join(home, LockName))
	if err != nil {
		return nil, fmt.Errorf("spool lock: %w", err)
	}
	return l, nil
}

func lock(home string) (*fsutil.Lock, error) {
	l, err := lockFile(home)
	if err != nil {
		return nil, err
	}
	if err := l.Lock(); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("spool lock: %w", err)
	}
	return l, nil
}

// Append adds one line (a JSON task spec, without its newline) to the spool.
func Append(home string, line []byte, now time.Time) error {
	if bytes.IndexByte(line, '\n') >= 0 {
		return errors.New("spool line contains a newline")
	}
	l, err := lock(home)
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	f, err := fsutil.OpenPrivate(filepath.Join(home, FileName), os.O_RDWR)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	if err := moveTorn(home, f, now); err != nil {
		return err
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	if _, err := f.Write(buf); err != nil {
		// Refused (a full disk): what was written of the line goes, so
		// that it is not taken later for a crashed append's leftover.
		_ = f.Truncate(end)
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// moveTorn moves an unterminated last line, left by a crashed appender,
// to the rejected file and cuts it off. The caller holds the lock.
func moveTorn(home string, f *os.File, now time.Time) error {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, st.Size()))
	if err != nil {
		return err
	}
	start := bytes.LastIndexByte(data, '\n') + 1
	if err := appendRejected(home, []Reject{{Line: data[start:], Err: TornError}}, now); err != nil {
		return err
	}
	return f.Truncate(int64(start))
}

func appendRejected(home string, rejects []Reject, now time.Time) error {
	if len(rejects) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, r := range rejects {
		rl := rejectedLine{At: now.UTC().Format("2006-01-02T15:04:05.000Z"), Error: r.Err}
		if utf8.Valid(r.Line) {
			line := string(r.Line)
			rl.Line = &line
		} else {
			enc := base64.StdEncoding.EncodeToString(r.Line)
			rl.LineBase64 = &enc
		}
		b, err := json.Marshal(rl)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f, err := fsutil.OpenPrivate(filepath.Join(home, RejectedName), os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return fmt.Errorf("spool rejected file: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(buf.Bytes()); err != nil {
		return err
	}
	return f.Sync()
}

// Pending reports whether the spool has anything in it, without locking.
// Anything but a regular file there counts: the drain refuses it, and
// says so, instead of passing it by in silence.
func Pending(home string) bool {
	st, err := os.Lstat(filepath.Join(home, FileName))
	return err == nil && (st.Size() > 0 || !st.Mode().IsRegular())
}

// Drain hands every complete line of the spool to store, which must commit
// them (idempotently, by task id) before it returns and give back the
// lines it could not store. Those go to the rejected file, and only then
// is the spool truncated, all under the lock: a crash at any point loses
// nothing, and a line stored twice is a no-op by id. It returns how many
// lines were handed over.
func Drain(home string, now func() time.Time, store func(lines [][]byte) ([]Reject, error)) (int, error) {
	if !Pending(home) {
		return 0, nil
	}
	l, err := lock(home)
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return drainLocked(home, now, store)
}

// DrainWithin is Drain for a command that only reads: it waits at most
// wait for the spool lock, and reports false, having drained nothing,
// if another process held it that long (that process is draining or
// appending; the lines stay for the next drain).
func DrainWithin(home string, now func() time.Time, wait time.Duration, store func(lines [][]byte) ([]Reject, error)) (int, bool, error) {
	if !Pending(home) {
		return 0, true, nil
	}
	l, err := lockFile(home)
	if err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	defer func() { _ = l.Close() }()
	ok, err := l.TryLockContext(ctx, 10*time.Millisecond)
	if !ok {
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return 0, false, fmt.Errorf("spool lock: %w", err)
		}
		return 0, false, nil
	}
	n, err := drainLocked(home, now, store)
	return n, err == nil, err
}

// drainLocked is Drain's work, under the spool lock.
func drainLocked(home string, now func() time.Time, store func(lines [][]byte) ([]Reject, error)) (int, error) {
	f, err := fsutil.OpenPrivate(filepath.Join(home, FileName), os.O_RDWR)
	if err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	if err := moveTorn(home, f, now()); err != nil {
		return 0, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	if len(data) == 0 {
		return 0, nil
	}
	var lines [][]byte
	for _, ln := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		// Only ASCII blanks make a line empty: anything else is a line to
		// store or reject, never to drop.
		if len(bytes.Trim(ln, " \t\r")) > 0 {
			lines = append(lines, ln)
		}
	}
	rejects, err := store(lines)
	if err != nil {
		return 0, err
	}
	if err := appendRejected(home, rejects, now()); err != nil {
		return 0, err
	}
	if err := f.Truncate(0); err != nil {
		return 0, err
	}
	return len(lines), nil
}
