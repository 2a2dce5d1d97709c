package image

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// encodeMeta encodes a record's metadata.
func encodeMeta(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("image: encode metadata: %w", err)
	}
	return b, nil
}

// decodeMeta decodes a record's metadata into v strictly: one JSON value,
// nothing after it, and no field v does not have. Any failure is
// ErrInvalid: the checksum already vouched for the bytes, so metadata that
// does not decode was written by something else than this version.
func decodeMeta(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode metadata: %v: %w", err, ErrInvalid)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("decode metadata: data after the JSON value: %w", ErrInvalid)
	}
	return nil
}

// Warm builds encoding/json's cached encoders and field tables of every
// record's metadata type, which the first record of each type otherwise
// pays for (about 4 ms for a Process, whose type holds dozens of nested
// structs). A dump or restore runs it in the background as it starts,
// while it waits for other things, so that the records it writes or
// reads while the processes are frozen do not wait for it.
func Warm() {
	for _, v := range []any{&Header{}, &Process{}, &Pages{}, &FileData{}, &endMeta{}} {
		json.Marshal(v)
	}
}
