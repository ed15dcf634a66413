// Package migrations reads a backend's schema migrations: one embedded
// file each, named NNNN_short_name.sql and numbered 1, 2, 3, … with no gap
// and no number twice (docs/store.md, Migrations). How a backend applies
// them and records its version is its own.
package migrations

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	SQL     string
}

// file is a migration's file, named but not yet read.
type file struct {
	version int
	name    string
}

// Set is a backend's migrations in the folder of an embedded file system.
// Their names are listed and checked once, on first use; their SQL is read
// only when a store is migrated, so a short command on an up-to-date store
// reads none.
type Set struct {
	files func() []file
	all   func() []Migration
}

// New returns the migrations in folder dir of fsys. Names that break the
// rule panic on first use: the files are embedded at build time and each
// backend's test calls Check, so only an untested build can.
func New(fsys fs.FS, dir string) *Set {
	s := &Set{}
	s.files = sync.OnceValue(func() []file {
		files, err := s.check(fsys, dir)
		if err != nil {
			panic("cq's embedded migrations: " + err.Error())
		}
		return files
	})
	s.all = sync.OnceValue(func() []Migration {
		files := s.files()
		out := make([]Migration, len(files))
		for i, f := range files {
			b, err := fs.ReadFile(fsys, dir+"/"+f.name)
			if err != nil {
				panic("cq's embedded migrations: " + err.Error())
			}
			out[i] = Migration{Version: f.version, SQL: string(b)}
		}
		return out
	})
	return s
}

// All returns the migrations in order of version.
func (s *Set) All() []Migration { return s.all() }

// Latest is the schema version the migrations lead to.
func (s *Set) Latest() int {
	f := s.files()
	return f[len(f)-1].version
}

func (s *Set) check(fsys fs.FS, dir string) ([]file, error) {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	return read(sub)
}

// Check reports what is wrong with the migration files of fsys's top
// folder, or nil.
func Check(fsys fs.FS) error {
	_, err := read(fsys)
	return err
}

// read lists the migration files of fsys in order of version and checks
// their names.
func read(fsys fs.FS) ([]file, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var files []file
	for _, e := range ents {
		name := e.Name()
		num, rest, _ := strings.Cut(name, "_")
		short, ok := strings.CutSuffix(rest, ".sql")
		if !ok || len(num) != 4 || strings.Trim(num, "0123456789") != "" || short == "" ||
			strings.Trim(short, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || e.IsDir() {
			return nil, fmt.Errorf("migration file %s: want NNNN_short_name.sql", name)
		}
		v, _ := strconv.Atoi(num)
		files = append(files, file{version: v, name: name})
	}
	if len(files) == 0 {
		return nil, errors.New("no migration files")
	}
	slices.SortStableFunc(files, func(a, b file) int { return a.version - b.version })
	for i, f := range files {
		switch {
		case i > 0 && f.version == files[i-1].version:
			return nil, fmt.Errorf("migration files %s and %s have the same number", files[i-1].name, f.name)
		case f.version != i+1:
			return nil, fmt.Errorf("migration file %s: number %d, want %d (numbers go 1, 2, 3, … with no gap)", f.name, f.version, i+1)
		}
	}
	return files, nil
}
