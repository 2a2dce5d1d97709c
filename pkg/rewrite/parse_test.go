package rewrite

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func addr(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 0) }

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Rule
	}{
		{"empty file", "", nil},
		{"only blank lines", "\n\n   \n\t\n", nil},
		{"only comments", "# a comment\n   # indented\n#\n", nil},
		{"ipv4 address", "10.0.0.1 10.0.0.2\n",
			[]Rule{{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 1}}},
		{"ipv4 port", "10.0.0.1:80 10.0.0.2:8080\n",
			[]Rule{{From: ap("10.0.0.1:80"), To: ap("10.0.0.2:8080"), Line: 1}}},
		{"ipv6 address", "fd00::1 fd00::2\n",
			[]Rule{{From: addr("fd00::1"), To: addr("fd00::2"), Line: 1}}},
		{"ipv6 port", "[fd00::1]:80 [fd00::2]:65535\n",
			[]Rule{{From: ap("[fd00::1]:80"), To: ap("[fd00::2]:65535"), Line: 1}}},
		{"unbracketed ipv6 with trailing group is an address", "::1:80 ::2:80\n",
			[]Rule{{From: addr("::1:80"), To: addr("::2:80"), Line: 1}}},
		{"ipv6 unspecified and loopback", ":: ::1\n",
			[]Rule{{From: addr("::"), To: addr("::1"), Line: 1}}},
		{"ipv4 unspecified", "0.0.0.0 10.0.0.2\n",
			[]Rule{{From: addr("0.0.0.0"), To: addr("10.0.0.2"), Line: 1}}},
		{"port 1 and leading zeros", "10.0.0.1:1 10.0.0.2:00080\n",
			[]Rule{{From: ap("10.0.0.1:1"), To: ap("10.0.0.2:80"), Line: 1}}},
		{"identity rule", "10.0.0.1:22 10.0.0.1:22\n",
			[]Rule{{From: ap("10.0.0.1:22"), To: ap("10.0.0.1:22"), Line: 1}}},
		{"trailing comment", "10.0.0.1 10.0.0.2 # moved\n10.0.0.3 10.0.0.4#tight\n",
			[]Rule{
				{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 1},
				{From: addr("10.0.0.3"), To: addr("10.0.0.4"), Line: 2},
			}},
		{"tabs and extra spaces", "\t10.0.0.1\t\t 10.0.0.2 \t\n",
			[]Rule{{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 1}}},
		{"crlf line endings", "# c\r\n10.0.0.1 10.0.0.2\r\n\r\n[fd00::1]:1 [fd00::2]:2\r\n",
			[]Rule{
				{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 2},
				{From: ap("[fd00::1]:1"), To: ap("[fd00::2]:2"), Line: 4},
			}},
		{"no final newline", "10.0.0.1 10.0.0.2",
			[]Rule{{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 1}}},
		{"byte order mark", "\uFEFF10.0.0.1 10.0.0.2\n",
			[]Rule{{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 1}}},
		{"line numbers count blank and comment lines", "\n# x\n\n10.0.0.1 10.0.0.2\n\n10.0.0.3:5 10.0.0.4:6\n",
			[]Rule{
				{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 4},
				{From: ap("10.0.0.3:5"), To: ap("10.0.0.4:6"), Line: 6},
			}},
		{"port rule before address rule for the same address", "10.0.0.1:22 10.0.0.1:22\n10.0.0.1 10.0.0.2\n",
			[]Rule{
				{From: ap("10.0.0.1:22"), To: ap("10.0.0.1:22"), Line: 1},
				{From: addr("10.0.0.1"), To: addr("10.0.0.2"), Line: 2},
			}},
		{"same TO twice is fine", "10.0.0.1 10.0.0.9\n10.0.0.2 10.0.0.9\n",
			[]Rule{
				{From: addr("10.0.0.1"), To: addr("10.0.0.9"), Line: 1},
				{From: addr("10.0.0.2"), To: addr("10.0.0.9"), Line: 2},
			}},
		{"ipv6 compressed forms are canonicalised", "FD00:0:0::0001 fd00::2\n",
			[]Rule{{From: addr("fd00::1"), To: addr("fd00::2"), Line: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse(strings.NewReader(tt.in), "rules.txt")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := rs.All(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rules = %v, want %v", got, tt.want)
			}
			if rs.Len() != len(tt.want) {
				t.Errorf("Len = %d, want %d", rs.Len(), len(tt.want))
			}
			if rs.Name() != "rules.txt" {
				t.Errorf("Name = %q", rs.Name())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		line    int
		text    string
		err     error
		message string // exact Error() if not empty
	}{
		{"port out of range", "# header\n\n10.0.0.1:99999 10.0.0.2:1\n", 3, "10.0.0.1:99999", ErrPortRange,
			`rules.txt:3: "10.0.0.1:99999": port out of range`},
		{"port 65536", "10.0.0.1:1 10.0.0.2:65536\n", 1, "10.0.0.2:65536", ErrPortRange, ""},
		{"huge port", "10.0.0.1:1 10.0.0.2:123456789012345678901234567890\n", 1, "10.0.0.2:123456789012345678901234567890", ErrPortRange, ""},
		{"port zero", "10.0.0.1:0 10.0.0.2:0\n", 1, "10.0.0.1:0", ErrPortZero, ""},
		{"port zeros", "10.0.0.1:1 10.0.0.2:000\n", 1, "10.0.0.2:000", ErrPortZero, ""},
		{"port not numeric", "10.0.0.1:http 10.0.0.2:80\n", 1, "10.0.0.1:http", ErrPort, ""},
		{"port with sign", "10.0.0.1:+80 10.0.0.2:80\n", 1, "10.0.0.1:+80", ErrPort, ""},
		{"port missing", "10.0.0.1: 10.0.0.2:80\n", 1, "10.0.0.1:", ErrPort, ""},
		{"bracketed without port", "[fd00::1] fd00::2\n", 1, "[fd00::1]", ErrPort, ""},
		{"bracketed empty port", "[fd00::1]: [fd00::2]:1\n", 1, "[fd00::1]:", ErrPort, ""},
		{"bracket not closed", "[fd00::1:80 [fd00::2]:80\n", 1, "[fd00::1:80", ErrAddress, ""},
		{"junk after bracket", "[fd00::1]x80 [fd00::2]:80\n", 1, "[fd00::1]x80", ErrAddress, ""},
		{"bracketed ipv4", "[10.0.0.1]:80 10.0.0.2:80\n", 1, "[10.0.0.1]:80", ErrAddress, ""},
		{"empty brackets", "[]:80 [fd00::2]:80\n", 1, "[]:80", ErrAddress, ""},
		{"unbracketed ipv6 with port", "10.0.0.9 10.0.0.8\nfd00::1:99999 fd00::2\n", 2, "fd00::1:99999", ErrAddress,
			`rules.txt:2: "fd00::1:99999": invalid IP address (an IPv6 address with a port must be bracketed: [ADDR]:PORT)`},
		{"bad ipv4", "10.0.0.256 10.0.0.2\n", 1, "10.0.0.256", ErrAddress,
			`rules.txt:1: "10.0.0.256": invalid IP address`},
		{"ipv4 leading zero", "10.0.0.01 10.0.0.2\n", 1, "10.0.0.01", ErrAddress, ""},
		{"hostname", "example.com 10.0.0.2\n", 1, "example.com", ErrAddress, ""},
		{"missing host", ":80 10.0.0.2:80\n", 1, ":80", ErrAddress, ""},
		{"bad TO", "10.0.0.1 10.0.0\n", 1, "10.0.0", ErrAddress, ""},
		{"unicode space is not a separator", "10.0.0.1\u00a010.0.0.2\n", 1, "10.0.0.1\u00a010.0.0.2", ErrFields, ""},
		{"one field", "10.0.0.1 10.0.0.2\n10.0.0.3   # no TO\n", 2, "10.0.0.3", ErrFields,
			`rules.txt:2: "10.0.0.3": expected "FROM TO": TO is missing`},
		{"three fields", "10.0.0.1 10.0.0.2 10.0.0.3\n", 1, "10.0.0.1 10.0.0.2 10.0.0.3", ErrFields,
			`rules.txt:1: "10.0.0.1 10.0.0.2 10.0.0.3": expected "FROM TO": 3 fields`},
		{"bare cr is white space", "10.0.0.1 10.0.0.2\r10.0.0.3 10.0.0.4\n", 1, "10.0.0.1 10.0.0.2 10.0.0.3 10.0.0.4", ErrFields, ""},
		{"address to port", "10.0.0.1 10.0.0.2:80\n", 1, "10.0.0.1 10.0.0.2:80", ErrKind, ""},
		{"port to address", "[fd00::1]:80 fd00::2\n", 1, "[fd00::1]:80 fd00::2", ErrKind, ""},
		{"ipv4 to ipv6", "10.0.0.1 fd00::1\n", 1, "10.0.0.1 fd00::1", ErrFamily,
			`rules.txt:1: "10.0.0.1 fd00::1": FROM and TO must be the same address family (a socket's family cannot change on restore)`},
		{"ipv6 to ipv4 with ports", "[fd00::1]:80 10.0.0.1:80\n", 1, "[fd00::1]:80 10.0.0.1:80", ErrFamily, ""},
		{"mapped FROM", "::ffff:10.0.0.1 10.0.0.2\n", 1, "::ffff:10.0.0.1", ErrMapped, ""},
		{"mapped TO with port", "[fd00::1]:80 [::ffff:10.0.0.2]:80\n", 1, "[::ffff:10.0.0.2]:80", ErrMapped, ""},
		{"zone", "fe80::1%eth0 fe80::2\n", 1, "fe80::1%eth0", ErrZone, ""},
		{"zone bracketed", "[fe80::1%2]:80 [fe80::2]:80\n", 1, "[fe80::1%2]:80", ErrZone, ""},
		{"zone on ipv4", "10.0.0.1%eth0 10.0.0.2\n", 1, "10.0.0.1%eth0", ErrZone, ""},
		{"duplicate address", "10.0.0.1 10.0.0.2\n\n10.0.0.1 10.0.0.3\n", 3, "10.0.0.1", ErrDuplicate,
			`rules.txt:3: "10.0.0.1": duplicate FROM, first given on line 1`},
		{"duplicate port", "[fd00::1]:80 [fd00::2]:80\n[fd00::1]:80 [fd00::3]:80\n", 2, "[fd00::1]:80", ErrDuplicate, ""},
		{"duplicate after canonicalisation", "fd00::1 fd00::2\nFD00:0::1 fd00::3\n", 2, "fd00::1", ErrDuplicate, ""},
		{"shadowed port rule", "10.0.0.1 10.0.0.2\n10.0.0.1:22 10.0.0.1:22\n", 2, "10.0.0.1:22", ErrShadowed,
			`rules.txt:2: "10.0.0.1:22": rule can never match: line 1 already rewrites every port of 10.0.0.1`},
		{"crlf error line", "# c\r\n10.0.0.1 10.0.0.2\r\n10.0.0.1:99999 10.0.0.2:1\r\n", 3, "10.0.0.1:99999", ErrPortRange, ""},
		{"line too long", "10.0.0.1 10.0.0.2\n# " + strings.Repeat("x", maxLine+10) + "\n", 2, "", ErrLineTooLong, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse(strings.NewReader(tt.in), "rules.txt")
			if err == nil {
				t.Fatalf("Parse succeeded with %v, want error", rs.All())
			}
			if rs != nil {
				t.Errorf("Parse returned rules with an error")
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *SyntaxError", err, err)
			}
			if se.File != "rules.txt" || se.Line != tt.line || se.Text != tt.text {
				t.Errorf("got File=%q Line=%d Text=%q, want rules.txt, %d, %q", se.File, se.Line, se.Text, tt.line, tt.text)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("error %v does not wrap %v", err, tt.err)
			}
			if tt.message != "" && err.Error() != tt.message {
				t.Errorf("message\n got %s\nwant %s", err.Error(), tt.message)
			}
		})
	}
}

func TestSyntaxErrorWithoutName(t *testing.T) {
	_, err := Parse(strings.NewReader("10.0.0.1:99999 10.0.0.2:1"), "")
	if got, want := err.Error(), `line 1: "10.0.0.1:99999": port out of range`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestParseReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("10.0.0.1 10.0.0.2\n"), iotest.ErrReader(boom))
	_, err := Parse(r, "rules.txt")
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want wrapped boom", err)
	}
	var se *SyntaxError
	if errors.As(err, &se) {
		t.Errorf("read error reported as a syntax error: %v", err)
	}
	if !strings.Contains(err.Error(), "rules.txt") {
		t.Errorf("error %q does not name the file", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.txt")
	writeFile(t, path, "10.0.0.1 10.0.0.2\n10.0.0.3:1 10.0.0.4\n")
	_, err := Load(path)
	var se *SyntaxError
	if !errors.As(err, &se) || se.File != path || se.Line != 2 || !errors.Is(err, ErrKind) {
		t.Fatalf("Load: got %v", err)
	}
	if !strings.HasPrefix(err.Error(), path+":2: ") {
		t.Errorf("message %q does not start with %q", err, path+":2: ")
	}

	writeFile(t, path, "10.0.0.1 10.0.0.2\n")
	rs, err := Load(path)
	if err != nil || rs.Len() != 1 || rs.Name() != path {
		t.Fatalf("Load: %v, %v", rs, err)
	}

	if _, err := Load(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing): got %v, want ErrNotExist", err)
	}
}

func TestLoadFlagOrEnv(t *testing.T) {
	dir := t.TempDir()
	flagFile := filepath.Join(dir, "flag.rules")
	envFile := filepath.Join(dir, "env.rules")
	writeFile(t, flagFile, "10.0.0.1 10.0.0.2\n")
	writeFile(t, envFile, "10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n")

	t.Setenv(EnvVar, "")
	rs, err := LoadFlagOrEnv("")
	if rs != nil || err != nil {
		t.Errorf("nothing set: got %v, %v; want nil, nil", rs, err)
	}

	t.Setenv(EnvVar, envFile)
	if rs, err = LoadFlagOrEnv(""); err != nil || rs.Name() != envFile {
		t.Errorf("env only: got %v, %v", rs, err)
	}
	if rs, err = LoadFlagOrEnv(flagFile); err != nil || rs.Name() != flagFile {
		t.Errorf("flag overrides env: got %v, %v", rs, err)
	}

	t.Setenv(EnvVar, filepath.Join(dir, "missing"))
	if _, err = LoadFlagOrEnv(""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing env file: got %v", err)
	}
}

func TestRuleString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"10.0.0.1   10.0.0.2", "10.0.0.1 10.0.0.2"},
		{"10.0.0.1:080\t10.0.0.2:8080", "10.0.0.1:80 10.0.0.2:8080"},
		{"FD00::0001 fd00:0::2", "fd00::1 fd00::2"},
		{"[fd00::1]:1 [fd00::2]:65535", "[fd00::1]:1 [fd00::2]:65535"},
		{"::1:80 ::2:80", "::1:80 ::2:80"},
	}
	for _, tt := range tests {
		rs, err := Parse(strings.NewReader(tt.in), "")
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.in, err)
		}
		if got := rs.All()[0].String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}
