package machine

import (
	"os"
	"strings"
)

// BootID is the kernel's random boot_id: two readings are equal only on
// the same machine between two boots, where device and inode numbers of
// files and their change times can be compared. It is "" if unknown.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SameBoot tells whether an image whose header says bootID was taken on
// this machine since it last booted.
func SameBoot(bootID string) bool { return bootID != "" && bootID == BootID() }
