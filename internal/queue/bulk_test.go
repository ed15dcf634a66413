package queue

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store/storetest"
)

// TestBulkCreateMatchesOneByOne: a batch written through the bulk path
// (pending tasks flushed with multi-row inserts) leaves exactly the rows
// and events the one-by-one path does: same states, lanes, seqs relative
// to the events, event order; lines that read the store (keys, ids of
// their own, dependencies on earlier lines) see every earlier line.
func TestBulkCreateMatchesOneByOne(t *testing.T) {
	mk := func(s Spec) Spec {
		t.Helper()
		n, err := s.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var specs []Spec
	for i := 0; i < 2*bulkRows+7; i++ {
		s := Spec{Cmd: []string{"echo", fmt.Sprint(i)}}
		switch {
		case i%97 == 5:
			s.Key = "k"
		case i%101 == 7:
			s.ID = fmt.Sprintf("own-%d", i)
		case i%89 == 3:
			s.Hold = true
		case i%83 == 2:
			s.Delay = "1h"
		case i%79 == 1:
			s.Priority = "P0"
		case i%73 == 4:
			s.Queue = "other"
		}
		specs = append(specs, mk(s))
	}
	// A line depending on an earlier line's own id, and a repeated id.
	specs = append(specs, mk(Spec{Cmd: []string{"true"}, After: []string{"own-7"}}), mk(Spec{Cmd: []string{"echo", "7"}, ID: "own-7"}))

	type taskOut struct {
		Line                                 int
		State, Queue, Key, Reason, NotBefore string
		Prio, LaneHead, Hold, Deps           int
		SeqIsGateway                         bool
	}
	run := func(bulk bool) ([]taskOut, []string) {
		noBulk = !bulk
		defer func() { noBulk = false }()
		d := storetest.OpenSQLite(t, "")
		st := New(d.Store())
		st.Now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
		created, err := st.Create(context.Background(), specs, CreateOptions{Enqueue: true})
		if err != nil {
			t.Fatal(err)
		}
		line := map[string]int{}
		for i, c := range created {
			if _, seen := line[c.ID]; !seen {
				line[c.ID] = i + 1
			}
		}
		rows, err := d.SQL.Query(`SELECT id, state, queue, COALESCE(key,''), COALESCE(blocked_reason,''), COALESCE(not_before,''),
			priority, lane_head, hold, deps_left,
			seq = (SELECT MAX(seq) FROM events e WHERE e.task_id = tasks.id AND e.from_state = 'inbox')
			FROM tasks ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		var tasks []taskOut
		for rows.Next() {
			var id string
			var o taskOut
			if err := rows.Scan(&id, &o.State, &o.Queue, &o.Key, &o.Reason, &o.NotBefore, &o.Prio, &o.LaneHead, &o.Hold, &o.Deps, &o.SeqIsGateway); err != nil {
				t.Fatal(err)
			}
			o.Line = line[id]
			tasks = append(tasks, o)
		}
		rows.Close()
		erows, err := d.SQL.Query(`SELECT task_id, kind, COALESCE(from_state,''), to_state FROM events ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		var events []string
		for erows.Next() {
			var id, kind, from, to string
			if err := erows.Scan(&id, &kind, &from, &to); err != nil {
				t.Fatal(err)
			}
			events = append(events, fmt.Sprintf("line %d %s %s>%s", line[id], kind, from, to))
		}
		erows.Close()
		return tasks, events
	}
	slowTasks, slowEvents := run(false)
	bulkTasks, bulkEvents := run(true)
	if len(slowTasks) != len(specs)-1 {
		t.Fatalf("%d tasks stored, want %d", len(slowTasks), len(specs)-1)
	}
	if !reflect.DeepEqual(slowTasks, bulkTasks) {
		for i := range slowTasks {
			if i < len(bulkTasks) && slowTasks[i] != bulkTasks[i] {
				t.Errorf("task %d: one by one %+v, bulk %+v", i, slowTasks[i], bulkTasks[i])
				break
			}
		}
		t.Fatalf("bulk path stored different tasks (%d vs %d)", len(bulkTasks), len(slowTasks))
	}
	if !reflect.DeepEqual(slowEvents, bulkEvents) {
		t.Fatalf("bulk path wrote different events (%d vs %d)", len(bulkEvents), len(slowEvents))
	}
	for _, o := range bulkTasks {
		if !o.SeqIsGateway {
			t.Fatalf("line %d: the task's seq is not its gateway event's", o.Line)
		}
	}
}
