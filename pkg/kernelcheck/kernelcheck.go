// Package kernelcheck probes the running kernel for the features ckpt
// relies on. Each probe exercises the feature on ckpt's own process (or
// calls it with arguments only a kernel that has it rejects the right way)
// rather than trusting version numbers, costs microseconds, and returns nil
// or an error wrapping ErrNotSupported that names the feature. dump.Run
// and restore.Build run the probes they need (Check) before they touch
// anything; `ckpt check` prints them all (Run).
package kernelcheck

import (
	"errors"
	"fmt"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"strings"
)

// ErrNotSupported is wrapped by the error of every probe that fails:
// "clone3 set_tid: not supported by this kernel (...)".
var ErrNotSupported = errors.New("not supported by this kernel")

// A NotSupportedError says which feature a probe found missing, and why.
type NotSupportedError struct {
	Feature string
	Cause   error // what the probe saw: an errno, a version
}

// Error says "FEATURE: not supported by this kernel (CAUSE)".
func (e *NotSupportedError) Error() string {
	return fmt.Sprintf("%s: %v (%v)", e.Feature, ErrNotSupported, e.Cause)
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// Unwrap gives the cause (errors.Is(err, unix.ENOSYS), for instance).
func (e *NotSupportedError) Unwrap() error { return e.Cause }

// notSupported wraps a probe's failure; nil stays nil.
func notSupported(feature string, cause error) error {
	if cause == nil {
		return nil
	}
	return &NotSupportedError{Feature: feature, Cause: cause}
}

// Need says which operations need a feature.
type Need uint8

// The operations a feature can be needed by. A feature needed by neither
// is optional: ckpt uses it where a process has what it serves (TCP
// connections, sockets) or falls back without it.
const (
	Dump    Need = 1 << iota // every dump
	Restore                  // every restore
)

// String lists the operations ("dump, restore"), or says "optional".
func (n Need) String() string {
	var s []string
	if n&Dump != 0 {
		s = append(s, "dump")
	}
	if n&Restore != 0 {
		s = append(s, "restore")
	}
	if len(s) == 0 {
		return "optional"
	}
	return strings.Join(s, ", ")
}

// A Feature is one kernel feature ckpt uses and its probe.
type Feature struct {
	Name  string // as errors and ckpt check name it
	Use   string // what ckpt does with it
	Need  Need   // which operations cannot work without it
	Probe func() error
}

// Features lists every feature ckpt uses, in the order ckpt check prints
// them. Each call returns a fresh table.
func Features() []Feature {
	fs := []Feature{
		{FeatureMapFiles, "mapped files reachable through /proc/PID/map_files", Dump | Restore, MapFiles},
		{FeatureKcmp, "open files shared between processes found with kcmp(KCMP_FILE)", Dump, Kcmp},
		{FeatureProcessVMReadv, "memory read in large batches", Dump, ProcessVMReadv},
		{FeaturePagemap, "present pages found without reading them", Dump, Pagemap},
		{FeaturePtraceRseq, "rseq registrations dumped", Dump, PtraceRseq},
		{FeatureClone3SetTID, "processes and threads get their old PIDs back", Restore, Clone3SetTID},
		{FeaturePRSetMMMap, "mm fields, auxv and exe link restored", Restore, PRSetMMMap},
		{FeatureMemfdCreate, "the restore helper runs from memory", Restore, MemfdCreate},
		{FeatureUserfaultfd, "restored memory filled with UFFDIO_COPY (else process_vm_writev)", 0, Userfaultfd},
		{FeaturePidfdGetfd, "sockets of the dumped processes read through pidfd_getfd", 0, PidfdGetfd},
		{FeatureTCPRepair, "TCP connections dumped and restored", 0, TCPRepair},
		{FeatureSockDiag, "sockets listed through netlink", 0, SockDiag},
	}
	return append(fs, bpfFeatures(bpftask.NewKernel())...)
}

// Check runs the probes of every feature need asks for (Dump, Restore or
// both), each once, and returns the first failure: an error wrapping
// ErrNotSupported that names the feature.
func Check(need Need) error {
	for _, f := range Features() {
		if f.Need&need == 0 {
			continue
		}
		if err := f.Probe(); err != nil {
			return err
		}
	}
	return nil
}

// Result is the outcome of one probe, as ckpt check prints it.
type Result struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`  // needed by every dump or every restore
	NeededBy string `json:"needed_by"` // "dump", "restore", "dump, restore" or "optional"
	Use      string `json:"use"`
	Error    string `json:"error,omitempty"` // the probe's error, if it failed
}

// Run runs every probe.
func Run() []Result {
	fs := Features()
	out := make([]Result, 0, len(fs))
	for _, f := range fs {
		r := Result{Name: f.Name, OK: true, Required: f.Need != 0, NeededBy: f.Need.String(), Use: f.Use}
		if err := f.Probe(); err != nil {
			r.OK, r.Error = false, err.Error()
		}
		out = append(out, r)
	}
	return out
}
