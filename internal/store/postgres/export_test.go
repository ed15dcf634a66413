package postgres

import "slices"

// OpenWith lets the tests of package postgres_test (which can use pgtest,
// itself built on this package) open a store with migrations of their
// own.
var OpenWith = openWith

// WithHost is url with its hosts replaced by hosts, for tests that
// need the same database through another address.
func WithHost(url, hosts string) (string, error) {
	u, err := parseURL(url, 0)
	if err != nil {
		return "", err
	}
	u.hosts = hosts
	u.keys = slices.DeleteFunc(u.keys, func(k string) bool { return k == "host" || k == "port" })
	delete(u.params, "host")
	delete(u.params, "port")
	return u.format(true), nil
}
