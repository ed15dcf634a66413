package sqlite

// The statements of store.RunReader and store.RunWriter.
