-- events_task indexed every event by its task: five index entries per
-- task run, inserted in the middle of the index, for one reader, cq
-- cleanup (about a fifth of a claim and finish cycle's time). Only the
-- first and last events of a task are indexed now: its task.created and
-- its terminal ones. A task cleanup deletes is terminal, and all its
-- events lie between the two (a run ends in the transaction that ends its
-- task, and nothing writes an event of a terminal task but a transition
-- out of it); cleanup notes those seq windows and then deletes, window
-- by window, the events whose task is gone (Store.SweepEvents). The
-- cleanup query repeats this WHERE word for word, so it reads the index.
DROP INDEX events_task;
CREATE INDEX events_task_ends ON events (task_id)
    WHERE kind = 'task.created' OR kind = 'task.done' OR kind = 'task.failed' OR kind = 'task.cancelled';
