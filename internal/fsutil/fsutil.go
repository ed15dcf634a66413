// Package fsutil creates cq's files and folders private to the user,
// whatever the umask: folders 0700, files 0600.
package fsutil

import (
	"fmt"
	"os"
)

// PrivateDir creates dir (and parents) if needed, 0700 whatever the
// umask. A folder that already exists is left as it is: the user chose
// it (--home ~ must not change the mode of a home folder, nor
// --home /srv/shared that of a shared one). Several processes may call
// it at once on the same path.
func PrivateDir(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("home %s is not a folder", dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create home folder: %w", err)
	}
	if st, err = os.Stat(dir); err != nil {
		return err
	}
	if st.Mode().Perm() != 0o700 {
		// Made just now (here or by a process racing this one) under a
		// umask that took bits away: give them back.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("cannot make home folder private: %w", err)
		}
	}
	return nil
}

// OpenPrivate opens path with flag, creating it with mode 0600; a file
// it created is chmod'ed to exactly 0600 so the umask cannot loosen or
// tighten it.
func OpenPrivate(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.Mode().Perm() != 0o600 {
		_ = f.Chmod(0o600)
	}
	return f, nil
}

// TouchPrivate makes sure path exists as a 0600 file.
func TouchPrivate(path string) error {
	f, err := OpenPrivate(path, os.O_RDONLY)
	if err != nil {
		return err
	}
	return f.Close()
}
