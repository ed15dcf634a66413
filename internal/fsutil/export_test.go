package fsutil

import "os"

// TouchPrivate makes sure path exists as a 0600 regular file.
func TouchPrivate(path string) error {
	f, err := OpenPrivate(path, os.O_RDONLY)
	if err != nil {
		return err
	}
	return f.Close()
}
