package sqlite

// The statements of store.IntakeReader and store.IntakeWriter.
