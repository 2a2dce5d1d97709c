// Package inventory is the written-down list of every piece of
// per-process state the Linux kernel lets a process observe, and what ckpt
// does with each: restore it exactly (and which fidelity case proves it),
// refuse the dump by name, or leave it because it is not state the
// program set (statistics the kernel recomputes).
//
// The table (All) is the reference; docs/inventory.md is generated from
// it (go test ./pkg/inventory -update). The tests of this package read the
// running kernel's surface — the keys of /proc/self/status, the VmFlags
// letters of smaps (seen on this machine, and the kernel's documented
// list), and every prctl option name of golang.org/x/sys/unix — and fail
// on anything the table does not list, so that a new kernel's new state
// cannot go unnoticed.
//
// Rows with Status Gap are known holes: neither restored nor refused yet.
// The rule of the project is that there must be none.
package inventory

import (
	"fmt"
	"sort"
	"strings"
)

// Status says what ckpt does with an attribute.
type Status string

// Statuses.
const (
	// Restored: saved at dump and restored exactly.
	Restored Status = "restored"
	// Refused: the dump fails naming the process, the object and why,
	// and leaves the process running untouched.
	Refused Status = "refused"
	// Derived: not state the program chose — statistics, or values the
	// kernel recomputes from other state (memory counters, context
	// switches, the PID of the tracer) — or the same by construction.
	Derived Status = "derived"
	// Gap: neither restored nor refused yet. Each is a known hole.
	Gap Status = "gap"
)

// Seen says where an attribute is visible to a process (or to ckpt).
type Seen struct {
	// StatusKeys are keys of /proc/PID/status.
	StatusKeys []string
	// VmFlags are two-letter flags of /proc/PID/smaps' VmFlags line.
	VmFlags []string
	// Prctl are prctl(2) options (PR_* names) that set or get it.
	Prctl []string
	// Other names the other places: /proc files, system calls.
	Other string
}

// Attr is one row of the inventory.
type Attr struct {
	Name   string
	Family string // process, thread, creds, signals, memory, fd, tree, socket
	Status Status
	Seen   Seen
	// Save and Restore say how (for Restored and Derived); Reason says
	// why it is refused, or what is missing for a Gap.
	Save, Restore, Reason string
	// CRIU is what CRIU does, with its option if it has one.
	CRIU string
	// Case names the fidelity case (test/fidelity) that proves a
	// restore or a refusal, or the e2e test.
	Case string
}

// Families returns the families, in the order the documentation lists them.
func Families() []string {
	return []string{"process", "thread", "creds", "signals", "memory", "fd", "tree", "socket"}
}

// StatusKeys returns every /proc/PID/status key the table lists.
func StatusKeys() map[string]bool { return collect(func(a Attr) []string { return a.Seen.StatusKeys }) }

// VmFlags returns every smaps VmFlags letter pair the table lists.
func VmFlags() map[string]bool { return collect(func(a Attr) []string { return a.Seen.VmFlags }) }

// PrctlOptions returns every prctl option the table lists.
func PrctlOptions() map[string]bool { return collect(func(a Attr) []string { return a.Seen.Prctl }) }

func collect(f func(Attr) []string) map[string]bool {
	m := map[string]bool{}
	for _, a := range All() {
		for _, k := range f(a) {
			m[k] = true
		}
	}
	return m
}

// PrctlCovered reports whether name, a PR_* constant, is a prctl option the
// table lists or an argument value of one (PrctlArgs).
func PrctlCovered(name string) bool {
	if PrctlOptions()[name] {
		return true
	}
	for prefix := range PrctlArgs() {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// Count returns how many rows have each status.
func Count() map[Status]int {
	m := map[Status]int{}
	for _, a := range All() {
		m[a.Status]++
	}
	return m
}

// Markdown renders the inventory as docs/inventory.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Inventory of per-process state\n\n")
	b.WriteString("Generated from `pkg/inventory` (`go test ./pkg/inventory -update`); do not edit.\n\n")
	b.WriteString("Every piece of state a process can observe is restored exactly, or the dump refuses,\n")
	b.WriteString("naming the process, the object and why. *derived* rows are not state the program set\n")
	b.WriteString("(statistics, values the kernel recomputes); *gap* rows are known holes.\n\n")
	c := Count()
	fmt.Fprintf(&b, "%d rows: %d restored, %d refused, %d derived, %d gap.\n",
		len(All()), c[Restored], c[Refused], c[Derived], c[Gap])
	for _, fam := range Families() {
		fmt.Fprintf(&b, "\n## %s\n\n", fam)
		b.WriteString("| attribute | status | seen at | saved / restored / refused | CRIU | proof |\n")
		b.WriteString("|---|---|---|---|---|---|\n")
		for _, a := range All() {
			if a.Family != fam {
				continue
			}
			how := a.Reason
			if a.Save != "" || a.Restore != "" {
				how = strings.TrimSuffix("saved: "+a.Save+"; restored: "+a.Restore, "; restored: ")
				if a.Reason != "" {
					how += "; " + a.Reason
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n",
				cell(a.Name), a.Status, cell(seen(a.Seen)), cell(how), cell(a.CRIU), cell(a.Case))
		}
	}
	b.WriteString("\n## prctl argument values\n\n")
	b.WriteString("PR_* names of golang.org/x/sys/unix that are arguments of a listed option, not options:\n\n")
	args := PrctlArgs()
	var ps []string
	for p := range args {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	for _, p := range ps {
		fmt.Fprintf(&b, "- `%s*`: %s\n", p, args[p])
	}
	return b.String()
}

func seen(s Seen) string {
	var parts []string
	if len(s.StatusKeys) > 0 {
		parts = append(parts, "status "+strings.Join(s.StatusKeys, ", "))
	}
	if len(s.VmFlags) > 0 {
		parts = append(parts, "VmFlags "+strings.Join(s.VmFlags, " "))
	}
	if len(s.Prctl) > 0 {
		parts = append(parts, strings.Join(s.Prctl, ", "))
	}
	if s.Other != "" {
		parts = append(parts, s.Other)
	}
	return strings.Join(parts, "; ")
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
