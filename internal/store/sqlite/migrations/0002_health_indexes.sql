-- cq health on a large store: the oldest waiting task, the wait warnings
-- and the tasks blocked for a retry, each read from a small partial index.
CREATE INDEX tasks_todo_since ON tasks (todo_at) WHERE state = 'todo';
CREATE INDEX tasks_warned ON tasks (queue) WHERE state = 'todo' AND warned = 1;
CREATE INDEX tasks_blocked_retry ON tasks (queue) WHERE state = 'blocked' AND blocked_reason = 'retry';
