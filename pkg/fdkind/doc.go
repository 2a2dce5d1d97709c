// Package fdkind holds one handler per kind of open file description
// (regular file, pipe, eventfd, socket, ...): how the dump describes it
// from the frozen process and how the restore rebuilds it, side by side in
// one file per kind, all listed in one table (kinds.go).
//
// Around the kinds, one common layer (common.go) saves and restores what
// every open file description has whatever its kind: its status flags
// (F_GETFL), its position, its F_SETOWN/F_SETSIG owner; and, per fd,
// FD_CLOEXEC.
//
// A kind's restore half yields either a file description opened in
// ckpt-redo and passed to the processes (Desc.File), or a way to open it
// inside the target (Desc.InTarget); and a kind may add steps that run
// inside each process holding the file once every fd is in place
// (Kind.Steps: epoll items). The packages dump and restore provide the
// environment a kind needs (DumpEnv, RestoreEnv, Target); this package
// never keeps state of its own.
//
// Adding a kind: one file here with its Kind value, its dump and restore
// halves and its test, and one line in the table.
package fdkind
