-- cq ls lists newest first by rowid (insertion order is creation order),
-- so this index only cost every insert a b-tree update and WAL pages.
DROP INDEX tasks_created;
