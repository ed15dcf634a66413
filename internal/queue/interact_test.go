package queue_test

import (
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/queue"
)

// running enqueues a task and starts its run.
func (b *bundle) running(t *testing.T, id string) *queue.Claimed {
	t.Helper()
	b.enq(t, queue.Spec{ID: id})
	c := b.claimOne(t, id)
	if err := b.st.StartRun(b.ctx, c.RunID, c.Token, 1, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// progressEvents are the done counts of task id's run.progress events.
func (b *bundle) progressEvents(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, e := range b.events(t, id) {
		if e.Kind == "run.progress" {
			out = append(out, string(e.Data))
		}
	}
	return out
}

// TestProgressRateLimit: reports closer than ProgressEventEvery to the
// run's last event update its progress without an event; the next report
// after the interval, or FlushProgress, writes the latest one's.
func TestProgressRateLimit(t *testing.T) {
	b := setup(t)
	c := b.running(t, "p")
	report := func(done int64) bool {
		t.Helper()
		ev, err := b.st.ReportProgress(b.ctx, c.RunID, done, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	if !report(1) {
		t.Error("the first report wrote no event")
	}
	b.clock.Add(100 * time.Millisecond)
	if report(2) || report(3) {
		t.Error("reports within the interval wrote events")
	}
	if p := b.get(t, "p").Progress; p == nil || *p.Done != 3 {
		t.Errorf("progress after the held-back reports = %+v, want done 3", p)
	}
	// Too soon for the flush too.
	if n, err := b.st.FlushProgress(b.ctx, 10); err != nil || n != 0 {
		t.Errorf("FlushProgress within the interval = %d, %v", n, err)
	}
	b.clock.Add(queue.ProgressEventEvery)
	if n, err := b.st.FlushProgress(b.ctx, 10); err != nil || n != 1 {
		t.Errorf("FlushProgress after the interval = %d, %v; want 1", n, err)
	}
	if n, err := b.st.FlushProgress(b.ctx, 10); err != nil || n != 0 {
		t.Errorf("a second FlushProgress = %d, %v; want 0", n, err)
	}
	got := b.progressEvents(t, "p")
	if len(got) != 2 || got[1] != `{"at":"2030-01-02T03:04:05.100Z","done":3,"message":null,"total":10}` {
		t.Errorf("run.progress events %v; want done 1, then the held-back done 3", got)
	}
	b.clock.Add(queue.ProgressEventEvery)
	if !report(4) {
		t.Error("a report after the interval wrote no event")
	}
	for _, bad := range []struct {
		done, total int64
		msg         string
	}{{-1, -1, ""}, {5, 4, ""}, {1, 2, "two\nlines"}} {
		if _, err := b.st.ReportProgress(b.ctx, c.RunID, bad.done, bad.total, bad.msg); queue.KindOf(err) != queue.Invalid {
			t.Errorf("ReportProgress(%v) = %v, want invalid", bad, err)
		}
	}
	if _, err := b.st.ReportProgress(b.ctx, "nosuch", 1, 2, ""); !queue.IsNotFound(err) {
		t.Errorf("ReportProgress of no run = %v", err)
	}
}

// TestQuestionCancel: a cancel of a task denies its run's open question in
// the cancel's transaction; an answer after that is refused.
func TestQuestionCancel(t *testing.T) {
	b := setup(t)
	c := b.running(t, "q")
	q, err := b.st.Ask(b.ctx, c.RunID, "go?", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.Cancel(b.ctx, "q", ""); err != nil {
		t.Fatal(err)
	}
	got, err := b.st.QuestionGet(b.ctx, q.ID)
	if err != nil || got.State != queue.AskDenied || str(got.Reason) != queue.DenyCancelled {
		t.Errorf("question after the cancel = %+v, %v", got, err)
	}
	if _, err := b.st.Answer(b.ctx, "q", true, ""); !queue.IsConflict(err) {
		t.Errorf("answer after the cancel = %v, want a conflict", err)
	}
	if _, err := b.st.Ask(b.ctx, c.RunID, "again?", 0); !queue.IsConflict(err) {
		t.Errorf("ask of a cancelling run = %v, want a conflict", err)
	}
}

// TestQuestionBeforeStartRecorded: a run's process may call in before its
// worker records the start (the run still queued): its question is
// taken, and a cancel then denies it.
func TestQuestionBeforeStartRecorded(t *testing.T) {
	b := setup(t)
	b.enq(t, queue.Spec{ID: "q"})
	c := b.claimOne(t, "q")
	q, err := b.st.Ask(b.ctx, c.RunID, "go?", 0)
	if err != nil {
		t.Fatalf("ask of a queued run: %v", err)
	}
	if _, _, err := b.st.Cancel(b.ctx, "q", ""); err != nil {
		t.Fatal(err)
	}
	got, err := b.st.QuestionGet(b.ctx, q.ID)
	if err != nil || got.State != queue.AskDenied || str(got.Reason) != queue.DenyCancelled {
		t.Errorf("question after the cancel of the queued run = %+v, %v", got, err)
	}
}
