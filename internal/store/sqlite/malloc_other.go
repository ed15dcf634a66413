//go:build !(linux && cgo)

package sqlite

// KeepFreedHeap does nothing where the C allocator is not glibc's, or
// there is no cgo to reach it.
func KeepFreedHeap() {}
