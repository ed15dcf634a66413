package postgres

// OpenWith lets the tests of package postgres_test (which can use pgtest,
// itself built on this package) open a store with migrations of their
// own.
var OpenWith = openWith
