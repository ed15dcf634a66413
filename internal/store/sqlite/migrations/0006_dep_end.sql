-- dep_end keeps how a dependency ended once cq cleanup has deleted it:
-- a task cancelled because its dependency failed must stay unretriable
-- after that dependency is gone (docs/semantics.md, Dependencies), while a dependency that
-- ended done and was deleted leaves nothing to wait for.
ALTER TABLE task_deps ADD COLUMN dep_end TEXT;
