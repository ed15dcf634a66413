package sqlite

// The statements of store.ViewReader and store.ViewWriter.
