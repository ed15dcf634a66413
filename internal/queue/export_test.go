package queue

// RecordPerRow makes s record every start and end of a cycle with its
// own statements (startTx, finishTx) instead of the batched UPDATEs, so
// that tests can check the two write the same.
func RecordPerRow(s *Store) { s.perRow = true }
