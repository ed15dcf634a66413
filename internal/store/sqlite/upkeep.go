package sqlite

// The statements of store.UpkeepReader and store.UpkeepWriter.
