//go:build linux && cgo

package sqlite

/*
#include <malloc.h>

// cq_keep_freed_heap keeps freed heap memory mapped instead of handing it
// back to the kernel after every statement. SQLite opens and closes a
// small pager for each statement's temporary b-tree and statement
// journal; with glibc's defaults each close trimmed the heap (brk) and the
// next statement faulted the same pages in again, a large part of a
// claim+complete cycle's CPU time (docs/performance.md).
static void cq_keep_freed_heap(void) {
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
	mallopt(M_TOP_PAD, 4 << 20);
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
}
*/
import "C"

// KeepFreedHeap tunes the C allocator, for the whole process, to keep
// freed heap mapped rather than trim it after each statement. It is the
// caller's choice, not this package's: a program (cmd/cq, a benchmark)
// calls it once before it opens a store.
func KeepFreedHeap() { C.cq_keep_freed_heap() }
